// tests/cpp/passes/test_constant_fold.cpp — fold_constants: which values a graph computes from no
// input data, and what must never be folded.
#include "codegen/passes/constant_fold.h"
#include "codegen/passes/graph_passes.h"

#include <ATen/ATen.h>

#include <gtest/gtest.h>

namespace fastdyn::codegen {
namespace {

TEST(ConstantFold, AMaskBuiltFromFactoriesBecomesAnInput) {
  // A causal mask from arange and a comparison, added to the input: the mask is a constant; the
  // zeros_like reads only x's metadata, so it folds too.
  Graph g = parse_graph(R"(graph(%0: f32[4, 4]{4, 1}):
  %1: i64[4]{1} = aten::arange.start_step(0, 4, 1, torch.int64, None, None, None)
  %2: i64[4, 1]{1, 1} = aten::unsqueeze(%1, 1)
  %3: b8[4, 4]{4, 1} = aten::gt.Tensor(%1, %2)
  %4: f32[4, 4]{4, 1} = aten::zeros_like(%0, torch.float32, None, None, None, None)
  %5: f32[4, 4]{4, 1} = aten::masked_fill.Scalar(%4, %3, -10000.0)
  %6: f32[4, 4]{4, 1} = aten::add.Tensor(%0, %5, 1)
  return (%6)
)");
  ConstantFolding f = fold_constants(g);
  EXPECT_EQ(f.constants.nodes.size(), 5u);
  EXPECT_EQ(f.constants.inputs, std::vector<ValueId>{0});  // zeros_like reads its metadata
  EXPECT_EQ(f.constants.outputs, std::vector<ValueId>{5});
  ASSERT_EQ(f.rest.nodes.size(), 1u);
  EXPECT_EQ(f.rest.nodes[0].op, OpId::add_Tensor);
  EXPECT_EQ(f.rest.inputs, (std::vector<ValueId>{0, 5}));
  EXPECT_EQ(f.rest.outputs, g.outputs);
}

TEST(ConstantFold, OutputsWrittenValuesAndRandomNumbersStayPerCall) {
  // %1 is returned (each call needs a fresh tensor), %2 is written in place, %4 is random.
  Graph g = parse_graph(R"(graph(%0: f32[4]{1}):
  %1: f32[4]{1} = aten::ones([4], torch.float32, None, None, None)
  %2: f32[4]{1} = aten::zeros([4], torch.float32, None, None, None)
  %3: f32[4]{1} = aten::add_.Tensor(%2, %0, 1)
  %4: f32[4]{1} = aten::rand([4], torch.float32, None, None, None)
  %5: f32[4]{1} = aten::mul.Tensor(%3, %4)
  return (%1, %5)
)");
  ConstantFolding f = fold_constants(g);
  EXPECT_TRUE(f.constants.nodes.empty());
  EXPECT_EQ(f.rest, g);
}

TEST(ConstantFold, AViewOfAWrittenValueIsNotFolded) {
  Graph g = parse_graph(R"(graph(%0: f32[4]{1}):
  %1: f32[2, 4]{4, 1} = aten::zeros([2, 4], torch.float32, None, None, None)
  %2: f32[4]{1} = aten::select.int(%1, 0, 0)
  %3: f32[4]{1} = aten::add_.Tensor(%2, %0, 1)
  %4: f32[2, 4]{4, 1} = aten::mul.Scalar(%1, 2)
  return (%4)
)");
  EXPECT_TRUE(fold_constants(g).constants.nodes.empty());
}

TEST(ConstantFold, AValueAnOutputViewsIsNotFolded) {
  Graph g = parse_graph(R"(graph(%0: f32[4]{1}):
  %1: f32[4]{1} = aten::ones([4], torch.float32, None, None, None)
  %2: f32[2, 2]{2, 1} = aten::view(%1, [2, 2])
  %3: f32[4]{1} = aten::add.Tensor(%0, %1, 1)
  return (%3, %2)
)");
  EXPECT_TRUE(fold_constants(g).constants.nodes.empty());
}

TEST(ConstantFold, LargeResultsAreNotPinned) {
  Graph g = parse_graph(R"(graph(%0: f32[2048, 1024]{1024, 1}):
  %1: f32[2048, 1024]{1024, 1} = aten::ones([2048, 1024], torch.float32, None, None, None)
  %2: f32[2048, 1024]{1024, 1} = aten::add.Tensor(%0, %1, 1)
  return (%2)
)");
  EXPECT_TRUE(fold_constants(g).constants.nodes.empty());  // 8 MB > kMaxFoldedBytes
}

TEST(ConstantFold, PastTheBudgetTheLargestValuesRunPerCallAndTheSmallOnesStayFolded) {
  // GPT-2's causal mask on an H200, in small: a mask from arange and cumsum (2 MB of bools), then
  // an additive bias over it (8 MB of floats) expanded over the batch. The whole chain used to be
  // kept per call (its expanded bias counted 32 MB), cumsum included, which the cuda backend has
  // no kernel for; now the bias's ops run per call, from the folded mask.
  Graph g = parse_graph(R"(graph(%0: f32[4, 2048, 1024]{2097152, 1024, 1}):
  %1: i64[1024]{1} = aten::arange.start_step(0, 1024, 1, torch.int64, None, None, None)
  %2: i64[2048]{1} = aten::arange.start_step(0, 2048, 1, torch.int64, None, None, None)
  %3: i64[2048]{1} = aten::cumsum(%2, -1, None)
  %4: i64[2048, 1]{1, 1} = aten::unsqueeze(%3, 1)
  %5: b8[2048, 1024]{1024, 1} = aten::le.Tensor(%1, %4)
  %6: f32[2048, 1024]{1024, 1} = aten::zeros([2048, 1024], torch.float32, None, None, None)
  %7: f32[2048, 1024]{1024, 1} = aten::masked_fill.Scalar(%6, %5, -10000.0)
  %8: f32[4, 2048, 1024]{0, 1024, 1} = aten::expand(%7, [4, 2048, 1024], False)
  %9: f32[4, 2048, 1024]{2097152, 1024, 1} = aten::add.Tensor(%0, %8, 1)
  return (%9)
)");
  ConstantFolding f = fold_constants(g);
  EXPECT_EQ(f.constants.nodes.size(), 5u);  // arange, arange, cumsum, unsqueeze, le
  EXPECT_EQ(f.constants.outputs, std::vector<ValueId>{5});
  ASSERT_EQ(f.rest.nodes.size(), 4u);  // zeros, masked_fill, expand, add
  EXPECT_EQ(f.rest.nodes[0].op, OpId::zeros);
}

TEST(ConstantFold, AFoldedValueIsLaidOutAsItsMetadataSays) {
  // ATen computes %2 row-major; the metadata (what kernels address it by) says column-major, as
  // CUDA's index gives other layouts than the CPU rules: the value is copied into that layout,
  // where folding used to be dropped for the whole graph (GPT-2's causal mask on an H200).
  Graph g = parse_graph(R"(graph(%0: f32[4, 4]{4, 1}):
  %1: f32[4, 4]{4, 1} = aten::ones([4, 4], torch.float32, None, None, None)
  %2: f32[4, 4]{1, 4} = aten::mul.Scalar(%1, 2)
  %3: f32[4, 4]{4, 1} = aten::add.Tensor(%0, %2, 1)
  return (%3)
)");
  RewrittenGraph r = rewrite_graph(g);
  ASSERT_EQ(r.constants.size(), 1u);
  EXPECT_EQ(r.constants[0].strides(), c10::IntArrayRef({1, 4}));
  EXPECT_TRUE(at::equal(r.constants[0], at::full({4, 4}, 2.0)));
  EXPECT_EQ(r.graph.nodes.size(), 1u);
}

}  // namespace
}  // namespace fastdyn::codegen
