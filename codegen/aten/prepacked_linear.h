// codegen/aten/prepacked_linear.h — `linear` (and addmm with a [in, out] weight, GPT-2's Conv1D) through
// oneDNN with the weight reordered once (codegen/ layer).
//
// A float32 linear large enough (M*N*K of at least kMinPrepackMacs) runs faster through oneDNN on
// a weight laid out for it in advance: 1.9-2.5x over ATen's MKL call for the 64 x 1024 x 4096
// MLP matmuls on the 2-core bench machine, 1.6x for GPT-2's vocabulary projection (below about
// 2M multiply-adds the fixed cost loses). The reordered copy is cached per node and reused only
// while the call's weight is the same tensor object with the same data pointer, version counter
// and a sample of its bits, so an in-place update (optimizer step, copy_, `.data =`, and the
// whole-weight writes through `.data` that bypass the version counter) is seen. A weight is
// reordered only after two calls in a row brought it unchanged: a weight that changes every call
// (training) never pays for a reorder, and runs as plain ATen linear. FASTDYN_PREPACK=0 turns
// it off.
#pragma once
#include "codegen/graph/graph.h"
#include "runtime/executable.h"

#include <cstdint>

namespace fastdyn::codegen {

constexpr int64_t kMinPrepackMacs = int64_t{1} << 21;

// The executable for a linear or addmm node (inputs: its tensor arguments in argument order, each
// once), or nullptr when the node does not qualify (dtype, shapes, size, addmm's beta/alpha not 1)
// or this torch has no oneDNN linear.
runtime::ExecutablePtr compile_prepacked_linear(const Graph& g, const Node& n);

}  // namespace fastdyn::codegen
