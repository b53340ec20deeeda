// codegen/passes/attention_decompose.h — small scaled_dot_product_attention calls written out as
// matmul -> scale, mask, softmax -> matmul (codegen/ layer).
//
// ATen's fused CPU attention kernel has a high fixed cost: on the 2-core bench machine it took
// 92 us for GPT-2's [1, 4, 64, 32] heads and 504 us for [1, 8, 128, 64], where two batched
// matmuls around one fused scale+mask+softmax kernel take about 30 us and 300 us. So where the
// score matrices are small (at most kMaxScoresElements elements in all) the llvm_cpu backend
// computes attention this way; beyond that the fused kernel, which never writes the scores to
// memory, stays. Only float32 calls without dropout, is_causal or enable_gqa, whose q, k and v
// share their batch dims, with no mask or a boolean or float32 one. The result keeps the call's
// metadata (a last pointwise copy writes it in the fused kernel's layout), so every later node's
// metadata stays true.
#pragma once
#include "codegen/graph/graph.h"

#include <cstdint>

namespace fastdyn::codegen {

constexpr int64_t kMaxScoresElements = int64_t{1} << 20;

// g with every such call written out (unchanged when there is none).
Graph decompose_small_attention(const Graph& g);

}  // namespace fastdyn::codegen
