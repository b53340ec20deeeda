// tests/cpp/loop/test_loop_passes.cpp — golden tests of the loop passes: graph text in, lowered /
// fused+planned program text out (tests/golden/loop/<name>.txt), plus fusion decisions asserted
// directly. FASTDYN_UPDATE_GOLDEN=1 rewrites the golden files (review the diff).
#include "codegen/graph/graph.h"
#include "codegen/loop/passes.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace fastdyn::codegen::loop {
namespace {

void golden(const std::string& name, const std::string& got) {
  const std::string path = std::string(FASTDYN_GOLDEN_DIR) + "/loop/" + name + ".txt";
  if (std::getenv("FASTDYN_UPDATE_GOLDEN")) {
    std::ofstream(path) << got;
    return;
  }
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << "missing golden " << path << " (run with FASTDYN_UPDATE_GOLDEN=1)";
  std::stringstream want;
  want << f.rdbuf();
  EXPECT_EQ(got, want.str()) << "golden " << path;
}

std::string passes_text(const std::string& graph_text) {
  Graph g = parse_graph(graph_text);
  LoweredGraph lg = lower(g);
  return "=== lowered ===\n" + print_lowered(lg) + "=== planned ===\n" + print_program(plan_memory(fuse(lg)));
}

int count_kernels(const Program& p) { return static_cast<int>(p.kernels.size()); }

const char* kChain = R"(graph(%0: f32[4, 8]{8, 1}, %1: f32[8]{1}):
  %2: f32[4, 8]{8, 1} = aten::add.Tensor(%0, %1, 1)
  %3: f32[4, 8]{8, 1} = aten::gelu(%2, "tanh")
  %4: f32[4, 8]{8, 1} = aten::mul.Scalar(%3, 2)
  return (%4)
)";

const char* kSoftmaxByHand = R"(graph(%0: f32[4, 8]{8, 1}):
  %1: f32[4, 1]{1, 1} = aten::amax(%0, [-1], True)
  %2: f32[4, 8]{8, 1} = aten::sub.Tensor(%0, %1, 1)
  %3: f32[4, 8]{8, 1} = aten::exp(%2)
  %4: f32[4, 1]{1, 1} = aten::sum.dim_IntList(%3, [-1], True, None)
  %5: f32[4, 8]{8, 1} = aten::div.Tensor(%3, %4)
  return (%5)
)";

const char* kLayerNormEpilogue = R"(graph(%0: f32[4, 8]{8, 1}, %1: f32[8]{1}, %2: f32[8]{1}):
  %3: f32[4, 8]{8, 1} = aten::layer_norm(%0, [8], %1, %2, 1e-05, True)
  %4: f32[4, 8]{8, 1} = aten::relu(%3)
  %5: f32[4]{1} = aten::mean.dim(%0, [-1], False, None)
  %6: f32[4]{1} = aten::mul.Scalar(%5, 3)
  return (%6, %4)
)";

const char* kViewsExtern = R"(graph(%0: f32[4, 8]{8, 1}, %1: f32[8, 8]{8, 1}):
  %2: f32[4, 8]{8, 1} = aten::mm(%0, %1)
  %3: f32[4, 8]{8, 1} = aten::add.Tensor(%2, %0, 1)
  %4: f32[8, 4]{1, 8} = aten::transpose.int(%3, 0, 1)
  %5: f32[8, 4]{4, 1} = aten::sigmoid(%4)
  %6: f32[6, 4]{4, 1} = aten::slice.Tensor(%5, 0, 2, None, 1)
  return (%6)
)";

TEST(LoopGolden, PointwiseChainIsOneKernel) {
  golden("pointwise_chain", passes_text(kChain));
  EXPECT_EQ(count_kernels(build_program(parse_graph(kChain))), 1);
}

TEST(LoopGolden, SoftmaxByHandIsOneKernel) {
  golden("softmax_by_hand", passes_text(kSoftmaxByHand));
  Program p = build_program(parse_graph(kSoftmaxByHand));
  ASSERT_EQ(count_kernels(p), 1);
  // the max and the sum live in registers: only the output is stored, exp(x - max) is a temp
  EXPECT_EQ(p.plans[1].kind, ValuePlan::Kind::None);
  EXPECT_EQ(p.plans[4].kind, ValuePlan::Kind::None);
}

TEST(LoopGolden, LayerNormWithEpiloguesFusesHorizontally) {
  golden("layer_norm_epilogue", passes_text(kLayerNormEpilogue));
  Program p = build_program(parse_graph(kLayerNormEpilogue));
  EXPECT_EQ(count_kernels(p), 1);
  EXPECT_EQ(p.plans[3].kind, ValuePlan::Kind::None);  // layer_norm output only feeds relu
  EXPECT_EQ(p.plans[5].kind, ValuePlan::Kind::None);  // mean only feeds the epilogue
}

TEST(LoopGolden, ExternThenFusedEpilogueThroughViews) {
  golden("views_extern", passes_text(kViewsExtern));
  Program p = build_program(parse_graph(kViewsExtern));
  ASSERT_EQ(p.steps.size(), 2u);
  EXPECT_EQ(p.steps[0].kind, Step::Kind::Extern);
  EXPECT_EQ(p.steps[1].kind, Step::Kind::Kernel);
  EXPECT_EQ(p.plans[6].kind, ValuePlan::Kind::Alias);  // the output slice is a view of the sigmoid
}

// Steps: exp -> %2 (0), mm -> %4 (1), exp -> %5 (2), mm -> %6 (3), exp -> %7 (4), mm -> %8 (5).
const char* kExpMmChain = R"(graph(%0: f32[16]{1}, %1: f32[16, 16]{16, 1}):
  %2: f32[16]{1} = aten::exp(%0)
  %3: f32[16, 1]{1, 1} = aten::unsqueeze(%2, 1)
  %4: f32[16, 16]{16, 1} = aten::mm(%3, %3)
  %5: f32[16, 16]{16, 1} = aten::exp(%4)
  %6: f32[16, 16]{16, 1} = aten::mm(%5, %1)
  %7: f32[16, 16]{16, 1} = aten::exp(%6)
  %8: f32[16, 16]{16, 1} = aten::mm(%7, %1)
  return (%8)
)";

TEST(LoopPasses, MemoryPlanReusesDeadTemporaries) {
  // two materialised temporaries of equal size, the first dead before the second is written
  Program p = build_program(parse_graph(kExpMmChain));
  EXPECT_EQ(p.plans[5].kind, ValuePlan::Kind::Buffer);
  EXPECT_EQ(p.plans[7].kind, ValuePlan::Kind::Buffer);
  EXPECT_EQ(p.plans[5].slot, p.plans[7].slot);
}

TEST(LoopPasses, MemoryPlanDropsEachValueAfterItsLastReader) {
  Program p = build_program(parse_graph(kExpMmChain));
  ASSERT_EQ(p.steps.size(), 6u);
  auto slot = [&](ValueId v) { return static_cast<size_t>(p.plans[static_cast<size_t>(v)].slot); };
  EXPECT_EQ(p.slot_alloc[slot(2)], 0);
  EXPECT_EQ(p.slot_release[slot(2)], 1);   // the first mm reads it through the unsqueeze view
  EXPECT_EQ(p.slot_release[slot(4)], 2);   // an extern result, dropped after the exp that reads it
  EXPECT_EQ(p.slot_alloc[slot(5)], 2);     // %5 and %7 share a slot: from %5's write to %7's read
  EXPECT_EQ(p.slot_release[slot(5)], 5);
  EXPECT_EQ(p.slot_release[slot(8)], -1);  // the output lives on
  // Inputs too: the program's reference goes after the last reader (with run_taking the memory
  // with it, as eager's autograd frees a node's saved tensors).
  EXPECT_EQ(p.slot_release[slot(0)], 0);
  EXPECT_EQ(p.slot_release[slot(1)], 5);
}

// Difftest seed 52656: the subtraction is stored straight into x, and the product reads x through
// a view of that result (an alias of an alias): x's slot lives until the product's kernel.
TEST(LoopPasses, MemoryPlanFollowsAliasChainsToTheInput) {
  Program p = build_program(parse_graph(R"(graph(%0: f32[4, 4]{4, 1}):
  %1: f32[4, 4]{4, 1} = aten::sub_.Scalar(%0, 4, 1)
  %2: f32[16]{1} = aten::view(%1, [16])
  %3: f32[16]{1} = aten::mul.Scalar(%2, 5)
  return (%3)
)"));
  const auto input_slot = static_cast<size_t>(p.plans[0].slot);
  int64_t last_reader = -1;
  for (size_t s = 0; s < p.steps.size(); ++s)
    if (p.steps[s].kind == Step::Kind::Kernel)
      for (const Stage& sg : p.kernels[static_cast<size_t>(p.steps[s].index)].stages)
        for (const Access& a : sg.loads)
          if (p.plans[static_cast<size_t>(a.value)].slot == static_cast<int32_t>(input_slot)) last_reader = static_cast<int64_t>(s);
  ASSERT_GE(last_reader, 0);
  EXPECT_TRUE(p.slot_release[input_slot] < 0 || p.slot_release[input_slot] >= last_reader)
      << "released after step " << p.slot_release[input_slot] << ", read at step " << last_reader;
}

TEST(LoopPasses, MemoryPlanKeepsAnInputThatAnOutputViews) {
  Program p = build_program(parse_graph(R"(graph(%0: f32[4, 4]{4, 1}):
  %1: f32[4, 4]{4, 1} = aten::exp(%0)
  %2: f32[4, 4]{1, 4} = aten::transpose.int(%0, 0, 1)
  return (%1, %2)
)"));
  EXPECT_EQ(p.slot_release[static_cast<size_t>(p.plans[0].slot)], -1);  // the returned view reads it after the steps
}

}  // namespace
}  // namespace fastdyn::codegen::loop

namespace fastdyn::codegen::loop {
namespace {

TEST(LoopPasses, PointwiseKernelWalksItsOutputsMemoryOrder) {
  // An NHWC result (passes/channels_last.h gives conv activations these strides) of an NCHW
  // input, then a consumer of the same layout merged into the same kernel: the domain is
  // N, H, W outer and C inner, so every backend stores along the contiguous dim.
  Program p = build_program(parse_graph(R"(graph(%0: f32[2, 4, 3, 5]{60, 15, 5, 1}, %1: f32[4, 1, 1]{1, 1, 1}):
  %2: f32[2, 4, 3, 5]{60, 1, 20, 4} = aten::mul.Tensor(%0, %1)
  %3: f32[2, 4, 3, 5]{60, 1, 20, 4} = aten::relu(%2)
  return (%2, %3)
)"));
  ASSERT_EQ(count_kernels(p), 1) << print_program(p);
  const Kernel& k = p.kernels[0];
  EXPECT_EQ(k.outer, (std::vector<int64_t>{2, 3, 5}));
  EXPECT_EQ(k.inner, (std::vector<int64_t>{4}));
  for (const Store& st : k.stages.at(0).stores) {  // value dim C is the kernel's last dim
    ASSERT_EQ(st.dst.index.size(), 4u);
    EXPECT_EQ(st.dst.index[1].coef, (std::vector<int64_t>{0, 0, 0, 1}));
    EXPECT_EQ(st.dst.index[3].coef, (std::vector<int64_t>{0, 0, 1, 0}));
  }
}

TEST(LoopPasses, ReadingAnotherPointOfAFusedValueSplitsTheKernel) {
  // y = x.sum(-1) is read transposed-through-a-view by the next op: other outer points, so the
  // consumer must not join the reduction's kernel.
  Program p = build_program(parse_graph(R"(graph(%0: f32[4, 4]{4, 1}):
  %1: f32[4, 4]{4, 1} = aten::exp(%0)
  %2: f32[4, 4]{4, 1} = aten::softmax.int(%1, -1, None)
  %3: f32[4, 4]{1, 4} = aten::transpose.int(%2, 0, 1)
  %4: f32[4, 4]{4, 1} = aten::add.Tensor(%2, %3, 1)
  return (%4)
)"));
  EXPECT_EQ(p.kernels.size(), 2u);
}

TEST(LoopPasses, SoftmaxStabilisesWithTheLooseMaxWhileAmaxKeepsTheExactOne) {
  // softmax / log_softmax / logsumexp subtract the row max only to keep exp in range: the loose
  // max (ReduceOp::MaxLoose, one x86 instruction) serves; amax is a result and propagates NaN.
  for (const char* op : {"aten::softmax.int(%0, -1, None)", "aten::log_softmax.int(%0, -1, None)",
                         "aten::logsumexp(%0, [-1], False)"}) {
    const bool rowwise = std::string(op).find("logsumexp") == std::string::npos;
    const std::string text = std::string("graph(%0: f32[4, 8]{8, 1}):\n  %1: f32[") + (rowwise ? "4, 8]{8, 1}" : "4]{1}") +
                             " = " + op + "\n  return (%1)\n";
    const std::string printed = print_program(build_program(parse_graph(text)));
    EXPECT_NE(printed.find("= max_loose f32"), std::string::npos) << printed;
  }
  const std::string amax = print_program(build_program(parse_graph(R"(graph(%0: f32[4, 8]{8, 1}):
  %1: f32[4]{1} = aten::amax(%0, [-1], False)
  return (%1)
)")));
  EXPECT_EQ(amax.find("max_loose"), std::string::npos) << amax;
  EXPECT_NE(amax.find("= max f32"), std::string::npos) << amax;
}

TEST(LoopPasses, HorizontalReductionsShareOneKernel) {
  Program p = build_program(parse_graph(R"(graph(%0: f32[4, 8]{8, 1}):
  %1: f32[4]{1} = aten::sum.dim_IntList(%0, [-1], False, None)
  %2: f32[4]{1} = aten::amax(%0, [-1], False)
  %3: f32[4]{1} = aten::sub.Tensor(%1, %2, 1)
  return (%3)
)"));
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_EQ(p.plans[1].kind, ValuePlan::Kind::None);
  EXPECT_EQ(p.plans[2].kind, ValuePlan::Kind::None);
}

// Fusion by bytes: a cheap value read twice is recomputed by its readers only if it loads at most
// one buffer. h = a + b (two loads) read by two reductions is stored once (1 store + 2 loads
// beats 4 loads), so a later layer does not recompute the whole residual stream; u = a * 2 (one
// load) is recomputed.
TEST(LoopPasses, MultiReadValueIsInlinedOnlyIfItLoadsOneBuffer) {
  Program p = build_program(parse_graph(R"(graph(%0: f32[4, 64]{64, 1}, %1: f32[4, 64]{64, 1}):
  %2: f32[4, 64]{64, 1} = aten::add.Tensor(%0, %1, 1)
  %3: f32[4]{1} = aten::sum.dim_IntList(%2, [-1], False, None)
  %4: f32[4, 64]{64, 1} = aten::mul.Scalar(%0, 2)
  %5: f32[4]{1} = aten::amax(%2, [-1], False)
  %6: f32[4]{1} = aten::sum.dim_IntList(%4, [-1], False, None)
  %7: f32[4]{1} = aten::amax(%4, [-1], False)
  return (%3, %5, %6, %7)
)"));
  EXPECT_EQ(p.plans[2].kind, ValuePlan::Kind::Buffer) << print_program(p);
  EXPECT_EQ(p.plans[4].kind, ValuePlan::Kind::None) << print_program(p);
}

// Rotary embeddings: cos/sin of [seq, dim] angles, read by every head of q [heads, seq, dim]
// through a broadcast. Inlined, the transcendental would run once per head; so an expensive value
// (a transcendental anywhere in its inlined body, here cos under the `* 1.0` scaling) that a
// reader broadcasts is stored once, even with one reader. A cheap one (the angles * 2) broadcast
// the same way is still recomputed, and so is cos read without a broadcast.
TEST(LoopPasses, ExpensiveValueBroadcastToItsReaderIsStoredOnce) {
  Program p = build_program(parse_graph(R"(graph(%0: f32[4, 64, 32]{2048, 32, 1}, %1: f32[64, 32]{32, 1}):
  %2: f32[64, 32]{32, 1} = aten::cos(%1)
  %3: f32[64, 32]{32, 1} = aten::mul.Scalar(%2, 1.0)
  %4: f32[4, 64, 32]{2048, 32, 1} = aten::mul.Tensor(%0, %3)
  %5: f32[64, 32]{32, 1} = aten::mul.Scalar(%1, 2)
  %6: f32[4, 64, 32]{2048, 32, 1} = aten::add.Tensor(%4, %5, 1)
  %7: f32[64, 32]{32, 1} = aten::sin(%1)
  %8: f32[64, 32]{32, 1} = aten::add.Tensor(%7, %1, 1)
  return (%6, %8)
)"));
  EXPECT_EQ(p.plans[2].kind, ValuePlan::Kind::None) << print_program(p);    // cos: inlined into %3
  EXPECT_EQ(p.plans[3].kind, ValuePlan::Kind::Buffer) << print_program(p);  // stored once
  EXPECT_EQ(p.plans[5].kind, ValuePlan::Kind::None) << print_program(p);    // cheap: recomputed
  EXPECT_EQ(p.plans[7].kind, ValuePlan::Kind::None) << print_program(p);    // no broadcast
}

// A cache layer's first update: cat([empty placeholder, keys]). The cat is lowered to stores that
// skip the empty piece, so nothing reads the factory's result any more and its ATen call goes.
TEST(LoopPasses, AFactoryNothingReadsIsNotCalled) {
  Program p = build_program(parse_graph(R"(graph(%0: f32[1, 2, 8, 4]{64, 32, 4, 1}):
  %1: f32[0]{1} = aten::full([0], 0, torch.float32, None, device("cpu"), None)
  %2: f32[1, 2, 8, 4]{64, 32, 4, 1} = aten::cat([%1, %0], -2)
  %3: f32[1, 2, 8, 4]{64, 32, 4, 1} = aten::mul.Scalar(%2, 2)
  return (%3)
)"));
  for (const Step& s : p.steps) EXPECT_NE(s.kind, Step::Kind::Extern) << print_program(p);
  EXPECT_EQ(p.plans[1].kind, ValuePlan::Kind::None) << print_program(p);
}

// RMS norm over [1, 64, 128] (a batch of one): mean, then rsqrt(mean + eps) once per row as an
// epilogue of the reduction (the rsqrt is stored once: its reader broadcasts it), then the
// normalisation, all in one kernel. The epilogue reads the mean at [0, o1, 0] where the reduction
// stored it at [o0, o1, 0]: the same point, since o0 only takes the value 0.
TEST(LoopPasses, RmsNormWithABatchOfOneIsOneKernel) {
  Program p = build_program(parse_graph(R"(graph(%0: f32[1, 64, 128]{8192, 128, 1}, %1: f32[128]{1}):
  %2: f32[1, 64, 128]{8192, 128, 1} = aten::pow.Tensor_Scalar(%0, 2)
  %3: f32[1, 64, 1]{64, 1, 1} = aten::mean.dim(%2, [-1], True, None)
  %4: f32[1, 64, 1]{64, 1, 1} = aten::add.Scalar(%3, 1e-06, 1)
  %5: f32[1, 64, 1]{64, 1, 1} = aten::rsqrt(%4)
  %6: f32[1, 64, 128]{8192, 128, 1} = aten::mul.Tensor(%0, %5)
  %7: f32[1, 64, 128]{8192, 128, 1} = aten::mul.Tensor(%1, %6)
  return (%7)
)"));
  EXPECT_EQ(count_kernels(p), 1) << print_program(p);
}

}  // namespace
}  // namespace fastdyn::codegen::loop

namespace fastdyn::codegen::loop {
namespace {

NodeLowering::Kind lowered_kind(const std::string& graph_text, size_t node = 0) {
  return lower(parse_graph(graph_text)).nodes.at(node).kind;
}

TEST(LoopLowering, IntegerDivisionByANonZeroNumberIsPointwiseByATensorStaysOnAten) {
  // ATen raises on an integer division by zero; generated code would trap, so only a known
  // non-zero divisor is lowered.
  EXPECT_EQ(lowered_kind(R"(graph(%0: i64[4, 8]{8, 1}):
  %1: i64[4, 8]{8, 1} = aten::floor_divide.Scalar(%0, 3)
  return (%1)
)"), NodeLowering::Kind::Pointwise);
  EXPECT_EQ(lowered_kind(R"(graph(%0: i64[4, 8]{8, 1}):
  %1: i64[4, 8]{8, 1} = aten::remainder.Scalar(%0, 0)
  return (%1)
)"), NodeLowering::Kind::Extern);
  EXPECT_EQ(lowered_kind(R"(graph(%0: i64[4, 8]{8, 1}, %1: i64[4, 8]{8, 1}):
  %2: i64[4, 8]{8, 1} = aten::div.Tensor_mode(%0, %1, "trunc")
  return (%2)
)"), NodeLowering::Kind::Extern);
  // floats divide by anything (IEEE), except 16-bit floor/trunc whose rounding ATen does stepwise
  EXPECT_EQ(lowered_kind(R"(graph(%0: f32[4, 8]{8, 1}, %1: f32[4, 8]{8, 1}):
  %2: f32[4, 8]{8, 1} = aten::floor_divide(%0, %1)
  return (%2)
)"), NodeLowering::Kind::Pointwise);
  EXPECT_EQ(lowered_kind(R"(graph(%0: bf16[4, 8]{8, 1}, %1: bf16[4, 8]{8, 1}):
  %2: bf16[4, 8]{8, 1} = aten::floor_divide(%0, %1)
  return (%2)
)"), NodeLowering::Kind::Extern);
}

TEST(LoopGolden, AnyAllAndShiftsFuseIntoOneReductionKernel) {
  const char* graph = R"(graph(%0: i64[4, 8]{8, 1}):
  %1: i64[4, 8]{8, 1} = aten::bitwise_left_shift.Tensor_Scalar(%0, 2)
  %2: i64[4, 8]{8, 1} = aten::floor_divide.Scalar(%1, -3)
  %3: b8[4]{1} = aten::any.dims(%2, [1], False)
  %4: b8[4]{1} = aten::all.dims(%0, [-1], False)
  return (%3, %4)
)";
  golden("any_all_shift_division", passes_text(graph));
  Program p = build_program(parse_graph(graph));
  EXPECT_EQ(p.kernels.size(), 1u);
  EXPECT_EQ(p.plans[2].kind, ValuePlan::Kind::None);  // the shifted quotient lives in registers
}

}  // namespace
}  // namespace fastdyn::codegen::loop

namespace fastdyn::codegen::loop {
namespace {

TEST(LoopPasses, ScanKernelNeverJoinsAPointwiseKernelAsPointwise) {
  // cumsum over dim 0 runs dim 0 in order; the relu kernel before it has dim 0 outer (split over
  // threads), so the scan must keep its own kernel, while the pointwise consumer joins the scan.
  Program p = build_program(parse_graph(R"(graph(%0: f32[4, 8]{8, 1}):
  %1: f32[4, 8]{8, 1} = aten::relu(%0)
  %2: f32[4, 8]{8, 1} = aten::cumsum(%0, 0, None)
  %3: f32[4, 8]{8, 1} = aten::mul.Scalar(%2, 2)
  return (%1, %3)
)"));
  ASSERT_EQ(p.kernels.size(), 2u);
  EXPECT_EQ(p.kernels[1].inner, std::vector<int64_t>{4});
  EXPECT_TRUE(has_scan(p.kernels[1].stages[0]));
  EXPECT_EQ(p.plans[2].kind, ValuePlan::Kind::None);  // the running sum feeds the mul in registers
}

}  // namespace
}  // namespace fastdyn::codegen::loop
