// codegen/passes/stacked_scalars.h — scalars stacked only to be selected again (codegen/ layer).
//
// torch.optim's multi-tensor Adam stacks its per-parameter step sizes (0-d tensors) into one
// 1-d tensor under a compiler (_stack_if_compiling) and hands the i-th element to the i-th
// parameter's update: `select(stack([s0, s1, ...]), 0, i)` is s_i. Reading s_i itself keeps the
// graph free of the stack (an extern on ATen, which sets an order among the kernels around it)
// and lets each s_i be computed where it is read. Applied where the select's result is a scalar
// that is not a graph output and nothing writes in place (the select's result views the stack,
// which no one can observe then); a stack left with no reader goes.
#pragma once
#include "codegen/graph/graph.h"

namespace fastdyn::codegen {

Graph forward_stacked_scalars(const Graph& g);

}  // namespace fastdyn::codegen
