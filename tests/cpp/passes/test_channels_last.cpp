// tests/cpp/passes/test_channels_last.cpp — which values prefer_channels_last moves to NHWC, and
// that the rewritten graph computes what the captured one does.
#include "codegen/passes/channels_last.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "codegen/aten/aten_backend.h"

namespace fastdyn::codegen {
namespace {

// conv -> relu -> conv -> relu -> max_pool, returning the pool and the first relu's view.
constexpr const char* kTwoConvs = R"(graph(%0: f32[2, 3, 8, 8]{192, 64, 8, 1}, %1: f32[4, 3, 3, 3]{27, 9, 3, 1}, %2: f32[4, 4, 1, 1]{4, 1, 1, 1}):
  %3: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::conv2d(%0, %1, None, [1, 1], [1, 1], [1, 1], 1)
  %4: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::relu(%3)
  %5: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::conv2d(%4, %2, None, [1, 1], [0, 0], [1, 1], 1)
  %6: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::relu(%5)
  %7: f32[2, 4, 4, 4]{64, 16, 4, 1} = aten::max_pool2d(%6, [2, 2], [2, 2], [0, 0], [1, 1], False)
  %8: f32[2, 4, 64]{256, 64, 1} = aten::view(%6, [2, 4, 64])
  return (%7, %8)
)";

const std::vector<int64_t> kNhwc{256, 1, 32, 4};

TEST(ChannelsLast, ConvChainRunsInNhwcAndTheCallerSeesEagersLayouts) {
  Graph g = parse_graph(kTwoConvs);
  Graph r = prefer_channels_last(g);
  // The input gets an NHWC copy that the first conv reads; the values between the convs move.
  ASSERT_EQ(r.nodes.size(), g.nodes.size() + 1) << print_graph(r);
  EXPECT_EQ(r.nodes[0].op, OpId::clone);
  EXPECT_EQ(r.nodes[0].args[0].value, 0);
  EXPECT_EQ(r.nodes[1].args[0].value, r.nodes[0].outputs[0]);
  EXPECT_EQ(r.meta(r.nodes[0].outputs[0]).strides, (std::vector<int64_t>{192, 1, 24, 3}));
  EXPECT_EQ(r.meta(3).strides, kNhwc);
  EXPECT_EQ(r.meta(4).strides, kNhwc);
  EXPECT_EQ(r.meta(5).strides, kNhwc);
  // %6 is read by a view (its strides were derived from %6's): it keeps NCHW, and so do the
  // graph's input and outputs.
  EXPECT_EQ(r.meta(6), g.meta(6));
  EXPECT_EQ(r.meta(0), g.meta(0));
  EXPECT_EQ(r.meta(7), g.meta(7));
  EXPECT_EQ(r.meta(8), g.meta(8));
  // Same values as the captured graph, on ATen.
  at::manual_seed(0);
  std::vector<at::Tensor> in{at::randn({2, 3, 8, 8}), at::randn({4, 3, 3, 3}), at::randn({4, 4, 1, 1})};
  std::vector<at::Tensor> want = compile_aten(g)->run(in), got = compile_aten(r)->run(in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::allclose(got[i], want[i], 1e-5, 1e-6)) << i;
}

TEST(ChannelsLast, OneConvOrConvsWhoseResultsTheCallerSeesStay) {
  // One conv: the copies would be ATen's own reorders, made by us.
  Graph one = parse_graph(R"(graph(%0: f32[2, 3, 8, 8]{192, 64, 8, 1}, %1: f32[4, 3, 3, 3]{27, 9, 3, 1}):
  %2: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::conv2d(%0, %1, None, [1, 1], [1, 1], [1, 1], 1)
  %3: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::relu(%2)
  return (%3)
)");
  EXPECT_EQ(prefer_channels_last(one), one);
  // Two convs whose results are both graph outputs: nothing of theirs is the graph's own.
  Graph outputs = parse_graph(R"(graph(%0: f32[2, 4, 8, 8]{256, 64, 8, 1}, %1: f32[4, 4, 1, 1]{4, 1, 1, 1}):
  %2: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::conv2d(%0, %1, None, [1, 1], [0, 0], [1, 1], 1)
  %3: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::conv2d(%2, %1, None, [1, 1], [0, 0], [1, 1], 1)
  return (%2, %3)
)");
  EXPECT_EQ(prefer_channels_last(outputs), outputs);
}

// ResNet's ReLU(inplace=True) and `out += identity`: a pointwise in-place op's output and `self`
// are one buffer, so they move with the convs around them (before, relu_ pinned both to NCHW, and
// every block paid a kernel writing NCHW and a copy back to NHWC for the next conv); where the
// in-place result is what the caller sees, its `self` keeps NCHW too, along the whole chain.
TEST(ChannelsLast, PointwiseInPlaceOpsMoveWithTheirSelf) {
  constexpr const char* kBlock = R"(graph(%0: f32[2, 4, 8, 8]{256, 64, 8, 1}, %1: f32[4, 4, 3, 3]{36, 9, 3, 1}):
  %2: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::conv2d(%0, %1, None, [1, 1], [1, 1], [1, 1], 1)
  %3: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::relu_(%2)
  %4: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::conv2d(%3, %1, None, [1, 1], [1, 1], [1, 1], 1)
  %5: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::add_.Tensor(%4, %3, 1)
  %6: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::relu_(%5)
  %7: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::conv2d(%6, %1, None, [1, 1], [1, 1], [1, 1], 1)
  %8: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::relu_(%7)
  return (%8)
)";
  Graph g = parse_graph(kBlock);
  Graph r = prefer_channels_last(g);
  ASSERT_EQ(r.nodes.size(), g.nodes.size() + 1) << print_graph(r);  // the input's NHWC copy only
  for (ValueId v : {2, 3, 4, 5, 6}) EXPECT_EQ(r.meta(v).strides, kNhwc) << "%" << v << "\n" << print_graph(r);
  // %8 is the output, so %7 (the same buffer) stays NCHW.
  EXPECT_EQ(r.meta(7), g.meta(7));
  EXPECT_EQ(r.meta(8), g.meta(8));
  at::manual_seed(0);
  std::vector<at::Tensor> in{at::randn({2, 4, 8, 8}), at::randn({4, 4, 3, 3})};
  std::vector<at::Tensor> want = compile_aten(g)->run({in[0].clone(), in[1]}), got = compile_aten(r)->run({in[0].clone(), in[1]});
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(at::allclose(got[0], want[0], 1e-5, 1e-5));  // (strides: ATen's op by op; tests/python checks the compiled ones)
  // The output's chain reaches back: relu_(add_(conv, x)) returned keeps the add's `self` NCHW.
  Graph chained = parse_graph(R"(graph(%0: f32[2, 4, 8, 8]{256, 64, 8, 1}, %1: f32[4, 4, 3, 3]{36, 9, 3, 1}):
  %2: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::conv2d(%0, %1, None, [1, 1], [1, 1], [1, 1], 1)
  %3: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::relu(%2)
  %4: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::conv2d(%3, %1, None, [1, 1], [1, 1], [1, 1], 1)
  %5: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::add_.Tensor(%4, %3, 1)
  %6: f32[2, 4, 8, 8]{256, 64, 8, 1} = aten::relu_(%5)
  return (%6)
)");
  Graph rc = prefer_channels_last(chained);
  for (ValueId v : {4, 5, 6}) EXPECT_EQ(rc.meta(v), chained.meta(v)) << "%" << v << "\n" << print_graph(rc);
}

}  // namespace
}  // namespace fastdyn::codegen
