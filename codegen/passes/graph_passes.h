// codegen/passes/graph_passes.h — the graph-level passes, in order, that a graph goes through before a
// loop backend lowers it (codegen/ layer). The whole compile of a graph is one ordered list:
//   1. these rewrites (rewrite_graph);
//   2. the loop pipeline: lowering, fusion, memory plan (codegen/loop/passes.h, build_program);
//   3. the backend's emission (llvm_cpu today).
// codegen/backends/backends.h's prepare_graph runs the list; FASTDYN_TIME_PASSES times every step
// and FASTDYN_DUMP=rewritten prints what the loop pipeline gets. The aten backend runs the graph
// as captured (its ops are eager's own: nothing to rewrite).
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "codegen/graph/graph.h"

namespace fastdyn::codegen {

struct RewrittenGraph {
  Graph graph;                       // what the loop pipeline lowers
  Graph folded;                      // the folded subgraph (empty: nothing folded)
  std::vector<at::Tensor> constants; // its values, computed now: graph's trailing inputs
};

// 0. forward_stacked_scalars: select(stack(scalars), 0, i) is scalar i (stacked_scalars.h);
// 1. decompose_small_attention: SDPA on small shapes as matmul + softmax + matmul (fusable);
// 2. fold_constants: values computed from no input data, evaluated once on ATen;
// 3. prefer_channels_last: conv activations in NHWC (channels_last.h).
RewrittenGraph rewrite_graph(const Graph& g);

}  // namespace fastdyn::codegen
