// codegen/autograd/derivatives.h — the derivative table: one row per differentiable op (codegen/).
//
// The single source of how each op's inputs get their gradients, in the manner of PyTorch's
// derivatives.yaml: a row names an ops.def op and a formula written with the ops a graph already
// has (codegen/autograd/grad_builder.h). An op without a row is not differentiated by fastdyn: a
// graph that needs its gradient keeps ATen's autograd (joint.h says where that is decided).
// Ops whose outputs never carry a gradient (comparisons, argmax, factories, integer ops) need no
// row: nothing reaches them.
#pragma once
#include "codegen/graph/graph.h"

#include <vector>

namespace fastdyn::codegen::autograd {

class GradBuilder;
using Formula = void (*)(GradBuilder&);

// The row of `op`, or nullptr.
Formula derivative(OpId op);

// For a builder whose node is a scaled_dot_product_attention call: its scale (1/sqrt(E) unless
// given), and its attention weights softmax(q kᵀ · scale, masked) as ATen's math kernel computes
// them (q and k each scaled by sqrt(scale), -inf where masked). The sdpa row recomputes them;
// joint.cpp writes an sdpa with dropout out with them.
double attention_scale(const GradBuilder& b);
ValueId attention_weights(GradBuilder& b);
// Every op with a row, in ops.def order (the coverage test and the gradient sweep read it).
std::vector<OpId> differentiable_ops();

}  // namespace fastdyn::codegen::autograd
