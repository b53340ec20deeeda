// tests/cpp/autograd/test_joint.cpp — the joint graph and its partition (codegen/autograd/joint.h):
// what the forward saves, what the backward recomputes, levels, and what is refused.
#include "codegen/autograd/derivatives.h"
#include "codegen/autograd/joint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace fastdyn::codegen::autograd {
namespace {

std::vector<OpId> ops(const Graph& g) {
  std::vector<OpId> out;
  for (const Node& n : g.nodes) out.push_back(n.op);
  return out;
}

TEST(AutogradJoint, MulSavesTheOtherOperandAndTheBackwardIsTwoMuls) {
  AutogradSplit s = split_for_autograd(parse_graph(R"(graph(%0: f32[4]{1} requires_grad, %1: f32[4]{1} requires_grad):
  %2: f32[4]{1} requires_grad = aten::mul.Tensor(%0, %1)
  return (%2)
)"));
  EXPECT_EQ(print_graph(s.forward), R"(graph(%0: f32[4]{1}, %1: f32[4]{1}):
  %2: f32[4]{1} = aten::mul.Tensor(%0, %1)
  return (%2, %0, %1)
)");
  EXPECT_EQ(print_graph(s.backward.at(0)), R"(graph(%0: f32[4]{1}, %1: f32[4]{1}, %2: f32[4]{1}):
  %3: f32[4]{1} = aten::mul.Tensor(%2, %1)
  %4: f32[4]{1} = aten::mul.Tensor(%2, %0)
  return (%3, %4)
)");
  ASSERT_EQ(s.plan.levels.size(), 1u);
  EXPECT_EQ(s.plan.levels[0].edge_inputs, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(s.plan.levels[0].edge_grad, (std::vector<int32_t>{0, 1}));
}

TEST(AutogradJoint, APointwiseChainIsRecomputedFromItsInputInsteadOfSaved) {
  // gelu's tanh form written out (GPT-2's gelu_new): only x is saved; the backward recomputes
  // the chain, which fuses into its kernels.
  AutogradSplit s = split_for_autograd(parse_graph(R"(graph(%0: f32[8, 16]{16, 1} requires_grad):
  %1: f32[8, 16]{16, 1} requires_grad = aten::pow.Tensor_Scalar(%0, 3.0)
  %2: f32[8, 16]{16, 1} requires_grad = aten::mul.Scalar(%1, 0.044715)
  %3: f32[8, 16]{16, 1} requires_grad = aten::add.Tensor(%0, %2, 1)
  %4: f32[8, 16]{16, 1} requires_grad = aten::mul.Scalar(%3, 0.7978845608)
  %5: f32[8, 16]{16, 1} requires_grad = aten::tanh(%4)
  %6: f32[8, 16]{16, 1} requires_grad = aten::add.Scalar(%5, 1.0, 1)
  %7: f32[8, 16]{16, 1} requires_grad = aten::mul.Scalar(%0, 0.5)
  %8: f32[8, 16]{16, 1} requires_grad = aten::mul.Tensor(%7, %6)
  return (%8)
)"));
  EXPECT_EQ(s.forward.outputs.size(), 2u);  // the output, then x
  EXPECT_EQ(s.forward.outputs[1], s.forward.inputs[0]);
  const std::vector<OpId> b = ops(s.backward.at(0));
  EXPECT_NE(std::find(b.begin(), b.end(), OpId::tanh), b.end());  // recomputed
}

TEST(AutogradJoint, TheOutputOfAnExternOpIsSavedNotRecomputed) {
  AutogradSplit s = split_for_autograd(parse_graph(R"(graph(%0: f32[4, 8]{8, 1}, %1: f32[3, 8]{8, 1} requires_grad):
  %2: f32[4, 3]{3, 1} requires_grad = aten::linear(%0, %1, None)
  %3: f32[4, 3]{3, 1} requires_grad = aten::tanh(%2)
  return (%3)
)"));
  // tanh's derivative reads its output, which comes from linear: saved, with x for the weight's gradient.
  EXPECT_EQ(s.forward.outputs.size(), 3u);
  EXPECT_EQ(s.forward.outputs[1], s.forward.inputs[0]);
  EXPECT_EQ(s.forward.outputs[2], s.forward.outputs[0]);
  EXPECT_EQ(ops(s.backward.at(0)).front(), OpId::mul_Tensor);
  EXPECT_EQ(s.plan.levels[0].edge_inputs, (std::vector<int32_t>{1}));
}

// exp and tanh of one linear output, multiplied: their derivatives read their own outputs, which
// the backward can recompute from the linear output. The cheapest cut saves that one [64, 256]
// value (and x for the weight's gradient), not the two values the backward reads: half the bytes
// of the rule it replaced (which saved what the backward reads unless the chain's start was saved
// anyway).
TEST(AutogradJoint, TheCutSavesOneValueTheBackwardRecomputesTwoFrom) {
  AutogradSplit s = split_for_autograd(parse_graph(R"(graph(%0: f32[64, 32]{32, 1}, %1: f32[256, 32]{32, 1} requires_grad):
  %2: f32[64, 256]{256, 1} requires_grad = aten::linear(%0, %1, None)
  %3: f32[64, 256]{256, 1} requires_grad = aten::exp(%2)
  %4: f32[64, 256]{256, 1} requires_grad = aten::tanh(%2)
  %5: f32[64, 256]{256, 1} requires_grad = aten::mul.Tensor(%3, %4)
  %6: f32[]{} requires_grad = aten::sum.dim_IntList(%5, None, False, None)
  return (%6)
)"));
  int64_t saved_bytes = 0, saved_linear = 0;
  for (size_t i = 1; i < s.forward.outputs.size(); ++i) {
    const ValueId v = s.forward.outputs[i];
    if (std::find(s.forward.inputs.begin(), s.forward.inputs.end(), v) != s.forward.inputs.end()) continue;
    saved_bytes += s.forward.meta(v).nbytes();
    for (const Node& n : s.forward.nodes)
      if (n.op == OpId::linear && n.outputs.at(0) == v) ++saved_linear;
  }
  EXPECT_EQ(saved_bytes, 64 * 256 * 4) << print_graph(s.forward);
  EXPECT_EQ(saved_linear, 1) << print_graph(s.forward);
  const std::vector<OpId> b = ops(s.backward.at(0));
  EXPECT_NE(std::find(b.begin(), b.end(), OpId::exp), b.end());  // recomputed
  EXPECT_NE(std::find(b.begin(), b.end(), OpId::tanh), b.end());
}

TEST(AutogradJoint, AnOutputComputedFromAnotherOutputIsALevelAboveIt) {
  AutogradSplit s = split_for_autograd(parse_graph(R"(graph(%0: f32[5]{1} requires_grad):
  %1: f32[5]{1} requires_grad = aten::exp(%0)
  %2: f32[5]{1} requires_grad = aten::mul.Tensor(%1, %1)
  %3: f32[]{} requires_grad = aten::sum.dim_IntList(%2, None, False, None)
  return (%1, %3)
)"));
  ASSERT_EQ(s.plan.levels.size(), 2u);
  EXPECT_EQ(s.plan.levels[0].outputs, (std::vector<int32_t>{0}));
  EXPECT_EQ(s.plan.levels[1].outputs, (std::vector<int32_t>{1}));
  EXPECT_EQ(s.plan.levels[1].edge_outputs, (std::vector<int32_t>{0}));  // s's gradient goes to y's edge
  EXPECT_EQ(s.plan.levels[1].edge_grad, (std::vector<int32_t>{-1, 0}));  // and none straight to x
  EXPECT_EQ(s.eager.at(1).inputs.size(), 2u);
}

TEST(AutogradJoint, RefusalsNameTheCulprit) {
  auto refusal = [](const char* text) {
    try {
      split_for_autograd(parse_graph(text));
    } catch (const NoDerivative& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(refusal(R"(graph(%0: f32[4]{1} requires_grad):
  %1: f32[4]{1} requires_grad = aten::cumsum(%0, 0, None)
  return (%1)
)").find("no derivative for aten::cumsum"), std::string::npos);
  EXPECT_NE(refusal(R"(graph(%0: f32[4]{1} requires_grad):
  %1: f32[4]{1} requires_grad = aten::mul.Scalar(%0, 2.0)
  %2: f32[4]{1} requires_grad = aten::slice.Tensor(%1, 0, 0, 4, 2)
  return (%2)
)").find("a slice with a step"), std::string::npos);
}

TEST(AutogradJoint, OutputsThatAreViewsOfAnInputOrAnOutputAreRemadeByTheRuntime) {
  AutogradSplit s = split_for_autograd(parse_graph(R"(graph(%0: f32[2, 2]{2, 1} requires_grad):
  %1: f32[4]{1} requires_grad = aten::view(%0, [4])
  %2: f32[2, 2]{2, 1} requires_grad = aten::exp(%0)
  %3: f32[2]{2} requires_grad = aten::select.int(%2, 1, 0)
  return (%1, %2, %3)
)"));
  ASSERT_EQ(s.plan.views.size(), 2u);
  EXPECT_TRUE(s.plan.views[0].of_input);
  EXPECT_EQ(s.plan.views[0].base, 0);
  EXPECT_FALSE(s.plan.views[1].of_input);
  EXPECT_EQ(s.plan.views[1].base, 1);  // output 1, the exp
  ASSERT_EQ(s.plan.levels.size(), 1u);
  EXPECT_EQ(s.plan.levels[0].outputs, (std::vector<int32_t>{1}));
}

TEST(AutogradJoint, WhatTheGraphComputesFromAReturnedViewTakesItsGradientThroughTheView) {
  // HF's lm_head reads hidden_states[:, slice] (an alias) that is also returned.
  AutogradSplit s = split_for_autograd(parse_graph(R"(graph(%0: f32[4]{1} requires_grad):
  %1: f32[4]{1} requires_grad = aten::exp(%0)
  %2: f32[2, 2]{2, 1} requires_grad = aten::view(%1, [2, 2])
  %3: f32[2, 2]{2, 1} requires_grad = aten::mul.Scalar(%2, 2.0)
  return (%1, %2, %3)
)"));
  ASSERT_EQ(s.plan.views.size(), 1u);
  EXPECT_EQ(s.plan.views[0].level, 0);  // the exp's level
  ASSERT_EQ(s.plan.levels.size(), 2u);
  EXPECT_EQ(s.plan.levels[1].outputs, (std::vector<int32_t>{2}));
  EXPECT_EQ(s.plan.levels[1].edge_outputs, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(s.plan.levels[1].edge_grad, (std::vector<int32_t>{-1, -1, 0}));  // through the view only
}

TEST(AutogradJoint, AMaskTheGraphComputesFromNothingKeepsTheMemoryEfficientAttention) {
  // Hugging Face's causal mask is built in the graph (arange, compare): it still becomes the
  // memory-efficient kernel's bias (the backward recomputes it, constant folding computes it once),
  // while a mask computed from an input keeps the sdpa row. Graph rewriting only: no GPU needed.
  auto graph = [](const char* mask) {
    return parse_graph(std::string(R"(graph(%0: f32[2, 4, 64, 64]{16384, 4096, 64, 1}@cuda:0 requires_grad, %1: f32[2, 4, 64, 64]{16384, 4096, 64, 1}@cuda:0 requires_grad, %2: f32[2, 4, 64, 64]{16384, 4096, 64, 1}@cuda:0 requires_grad, %3: i64[64]{1}@cuda:0):
  %4: i64[64]{1}@cuda:0 = )") + mask + R"(
  %5: i64[64, 1]{1, 1}@cuda:0 = aten::unsqueeze(%4, 1)
  %6: b8[64, 64]{64, 1}@cuda:0 = aten::le.Tensor(%4, %5)
  %7: f32[2, 4, 64, 64]{16384, 4096, 64, 1}@cuda:0 requires_grad = aten::scaled_dot_product_attention(%0, %1, %2, %6, 0.0, False, 0.125, False)
  return (%7)
)");
  };
  auto has = [](const Graph& g, OpId op) {
    return std::any_of(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return n.op == op; });
  };
  const AutogradSplit computed = split_for_autograd(graph(R"(aten::arange.start_step(0, 64, 1, torch.int64, None, device("cuda:0"), None))"));
  EXPECT_TRUE(has(computed.forward, OpId::_scaled_dot_product_efficient_attention)) << print_graph(computed.forward);
  // tests/python/test_autograd_kernels.py's "computed" case as traced on a GPU.
  const AutogradSplit traced = split_for_autograd(parse_graph(R"(graph(%7: f32[2, 4, 64, 64]{16384, 4096, 64, 1}@cuda:0 requires_grad, %9: f32[2, 4, 64, 64]{16384, 4096, 64, 1}@cuda:0 requires_grad, %10: f32[2, 4, 64, 64]{16384, 4096, 64, 1}@cuda:0 requires_grad):
  %0: i64[64]{1}@cuda:0 = aten::ones([64], torch.int64, None, device("cuda:0"), None)
  %1: i64[64]{1}@cuda:0 = aten::cumsum(%0, 0, None)
  %2: i64[1, 64]{64, 1}@cuda:0 = aten::unsqueeze(%1, 0)
  %3: i64[64, 1]{1, 1}@cuda:0 = aten::unsqueeze(%1, 1)
  %4: b8[64, 64]{64, 1}@cuda:0 = aten::le.Tensor(%2, %3)
  %5: b8[1, 64, 64]{4096, 64, 1}@cuda:0 = aten::unsqueeze(%4, 0)
  %6: b8[1, 1, 64, 64]{4096, 4096, 64, 1}@cuda:0 = aten::unsqueeze(%5, 1)
  %8: f32[2, 4, 64, 64]{16384, 4096, 64, 1}@cuda:0 requires_grad = aten::mul.Scalar(%7, 2)
  %11: f32[2, 4, 64, 64]{16384, 4096, 64, 1}@cuda:0 requires_grad = aten::scaled_dot_product_attention(%8, %9, %10, %6, 0.0, False, None, False)
  %12: f32[2, 4, 64, 64]{16384, 4096, 64, 1}@cuda:0 requires_grad = aten::relu(%11)
  return (%12)
)"));
  EXPECT_TRUE(has(traced.forward, OpId::_scaled_dot_product_efficient_attention)) << print_graph(traced.forward);
  const AutogradSplit from_input = split_for_autograd(graph("aten::mul.Scalar(%3, 2)"));
  EXPECT_FALSE(has(from_input.forward, OpId::_scaled_dot_product_efficient_attention)) << print_graph(from_input.forward);
}

TEST(AutogradJoint, InferenceAttentionOnAGpuTakesTheMemoryEfficientKernelWithAnyMask) {
  // No grad: a mask computed from an input is fine (nothing recomputes it); the bias replaces the
  // ATen calls eager's sdpa would make to convert it. A CPU graph, or one that requires grad, stays.
  auto graph = [](const char* device, const char* grad) {
    const std::string d = device, rg = grad;
    return parse_graph("graph(%0: f32[2, 4, 64, 64]{16384, 4096, 64, 1}" + d + rg + ", %1: f32[2, 4, 64, 64]{16384, 4096, 64, 1}" + d +
                       ", %2: f32[2, 4, 64, 64]{16384, 4096, 64, 1}" + d + ", %3: i64[64]{1}" + d + "):\n" +
                       "  %4: i64[64]{1}" + d + " = aten::mul.Scalar(%3, 2)\n" +
                       "  %5: i64[64, 1]{1, 1}" + d + " = aten::unsqueeze(%4, 1)\n" +
                       "  %6: b8[64, 64]{64, 1}" + d + " = aten::le.Tensor(%4, %5)\n" +
                       "  %7: f32[2, 4, 64, 64]{16384, 4096, 64, 1}" + d + rg +
                       " = aten::scaled_dot_product_attention(%0, %1, %2, %6, 0.0, False, 0.125, False)\n  return (%7)\n");
  };
  auto has = [](const Graph& g, OpId op) {
    return std::any_of(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return n.op == op; });
  };
  const Graph gpu = with_efficient_attention(graph("@cuda:0", ""), /*training=*/false);
  EXPECT_TRUE(has(gpu, OpId::_scaled_dot_product_efficient_attention)) << print_graph(gpu);
  EXPECT_FALSE(has(gpu, OpId::scaled_dot_product_attention)) << print_graph(gpu);
  EXPECT_EQ(gpu.outputs, graph("@cuda:0", "").outputs);  // the same value returned: the kernel's first output
  EXPECT_FALSE(has(with_efficient_attention(graph("", ""), false), OpId::_scaled_dot_product_efficient_attention));
  EXPECT_FALSE(has(with_efficient_attention(graph("@cuda:0", " requires_grad"), false), OpId::_scaled_dot_product_efficient_attention));
}

TEST(AutogradJoint, NeedsAutogradOnlyForComputedOutputsThatRequireGrad) {
  EXPECT_TRUE(needs_autograd(parse_graph(R"(graph(%0: f32[4]{1} requires_grad):
  %1: f32[4]{1} requires_grad = aten::exp(%0)
  return (%1)
)")));
  EXPECT_FALSE(needs_autograd(parse_graph(R"(graph(%0: f32[4]{1} requires_grad, %1: f32[4]{1}):
  %2: f32[4]{1} = aten::exp(%1)
  return (%2, %0)
)")));
}

}  // namespace
}  // namespace fastdyn::codegen::autograd
