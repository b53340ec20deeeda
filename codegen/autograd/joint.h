// codegen/autograd/joint.h — a graph whose outputs require grad becomes a forward graph and a
// backward graph (codegen/ layer; the graph-rewrite step of the one pass list).
//
// The joint graph is the traced graph followed by its reverse-mode derivative: for each node, last
// to first, the derivative table's row (derivatives.h) records the gradients of its inputs from
// those of its outputs, accumulated where a value feeds several nodes. The partition then cuts the
// joint graph in two:
//   forward  = the traced nodes; it returns the traced outputs, then the values the backward reads
//              ("saved"),
//   backward = the gradient nodes, plus the forward values it recomputes instead of saving.
// Outputs computed from other outputs that require grad form levels (runtime/autograd_plan.h): each
// level is differentiated on the graph cut at the lower levels' outputs, which become its inputs.
// What is saved and what is recomputed: a minimum cut over bytes (joint.cpp cheapest_cut, the
// network of AOTAutograd's min-cut partitioner): the forward saves the cheapest set of values from
// which the backward can compute everything it reads by recomputable nodes (pointwise, views,
// casts) alone; the outputs of matmul, conv, sdpa, reductions and random draws are never
// recomputed. Graph inputs cost almost nothing to save (the caller holds them), values the caller
// gets back are saved only where the backward reads them (never recomputed from), values
// computed from no input (masks from arange) are recomputed, and of equal bytes what the backward
// reads is saved (recomputing it would hold both in the backward). Recomputing pointwise work is
// free on a memory-bound backward (it fuses into the kernels that read it).
// Both graphs are ordinary graphs with no value that requires grad: every backend compiles them.
// runtime/autograd_function.h wires them to autograd; `AutogradSplit` is the contract.
// What is refused (NoDerivative: the graph keeps ATen's autograd): an op without a derivative row
// on the path of a gradient, writes into inputs that require grad, sdpa with dropout on a GPU, and
// a formula's own refusals. A graph whose sizes vary is split once per size met (specialised).
#pragma once
#include "codegen/autograd/grad_builder.h"
#include "codegen/graph/graph.h"
#include "runtime/autograd_plan.h"

#include <cstdint>
#include <vector>

namespace fastdyn::codegen::autograd {

struct AutogradSplit {
  Graph forward;                // the graph's inputs -> the graph's outputs, then the saved values
  std::vector<Graph> backward;  // per level: its saved values, then one gradient per level output -> one per next edge with one
  std::vector<Graph> eager;     // per level: the traced graph with lower levels' outputs as inputs (after the graph's
                                // inputs), returning the level's outputs: what create_graph=True differentiates on ATen
  runtime::AutogradPlan plan;
};

// Whether compiling `g` needs an autograd node: some output computed by the graph requires grad,
// and the graph was traced in grad mode.
bool needs_autograd(const Graph& g);

// Throws NoDerivative naming the op or the reason when the graph keeps ATen's autograd.
AutogradSplit split_for_autograd(const Graph& g);

// sdpa on a GPU where eager runs the memory-efficient kernel, as that kernel's op with the mask as
// its additive bias (joint.cpp says when): for the split (`training`: outputs that require grad,
// whose backward reads the saved log-sum-exp) and for inference on the cuda backend (outputs that
// do not), where eager's sdpa converts the mask in ATen calls of its own at every call.
Graph with_efficient_attention(const Graph& g, bool training);

}  // namespace fastdyn::codegen::autograd
