// tests/cpp/passes/test_attention_decompose.cpp — which scaled_dot_product_attention calls
// decompose_small_attention writes out, and into what.
#include "codegen/passes/attention_decompose.h"

#include <gtest/gtest.h>

#include <cmath>

namespace fastdyn::codegen {
namespace {

std::vector<OpId> ops(const Graph& g) {
  std::vector<OpId> out;
  for (const Node& n : g.nodes) out.push_back(n.op);
  return out;
}

TEST(AttentionDecompose, SmallMaskedCallBecomesMatmulsAroundASoftmax) {
  Graph g = parse_graph(R"(graph(%0: f32[1, 4, 64, 32]{8192, 32, 128, 1}, %1: f32[1, 4, 64, 32]{8192, 32, 128, 1}, %2: f32[1, 4, 64, 32]{8192, 32, 128, 1}, %3: b8[1, 1, 64, 64]{4096, 4096, 64, 1}):
  %4: f32[1, 4, 64, 32]{8192, 32, 128, 1} = aten::scaled_dot_product_attention(%0, %1, %2, %3, 0.0, False, None, False)
  return (%4)
)");
  Graph d = decompose_small_attention(g);
  EXPECT_EQ(ops(d), (std::vector<OpId>{OpId::transpose_int, OpId::matmul, OpId::mul_Scalar, OpId::logical_not,
                                       OpId::masked_fill_Scalar, OpId::softmax_int, OpId::amax, OpId::eq_Scalar,
                                       OpId::masked_fill_Scalar, OpId::matmul, OpId::clone}));
  EXPECT_EQ(d.nodes.back().outputs, std::vector<ValueId>{4});  // the call's value, layout kept
  EXPECT_EQ(d.meta(4), g.meta(4));
  EXPECT_DOUBLE_EQ(d.nodes[2].args[1].d, 1.0 / std::sqrt(32.0));
}

TEST(AttentionDecompose, LargeCausalAndDropoutCallsStay) {
  const char* large = R"(graph(%0: f32[1, 8, 1024, 16]{131072, 16384, 16, 1}):
  %1: f32[1, 8, 1024, 16]{131072, 16384, 16, 1} = aten::scaled_dot_product_attention(%0, %0, %0, None, 0.0, False, None, False)
  return (%1)
)";
  const char* causal = R"(graph(%0: f32[1, 4, 8, 16]{512, 128, 16, 1}):
  %1: f32[1, 4, 8, 16]{512, 128, 16, 1} = aten::scaled_dot_product_attention(%0, %0, %0, None, 0.0, True, None, False)
  return (%1)
)";
  const char* dropout = R"(graph(%0: f32[1, 4, 8, 16]{512, 128, 16, 1}):
  %1: f32[1, 4, 8, 16]{512, 128, 16, 1} = aten::scaled_dot_product_attention(%0, %0, %0, None, 0.1, False, None, False)
  return (%1)
)";
  for (const char* text : {large, causal, dropout}) {
    Graph g = parse_graph(text);
    EXPECT_EQ(decompose_small_attention(g), g) << text;
  }
}

}  // namespace
}  // namespace fastdyn::codegen
