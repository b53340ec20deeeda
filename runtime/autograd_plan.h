// runtime/autograd_plan.h — how a compiled forward and its backwards meet autograd (runtime/ layer).
//
// codegen/autograd/joint.h fills it when it splits a graph whose outputs require grad; the
// autograd executable (autograd_function.h) follows it on every call. Indices, no tensors.
//
// Outputs come in levels: an output computed from another output that requires grad (`y` and
// `s = y.sum()`, both returned) must receive its gradient through that output's own autograd edge,
// as in eager, so that hooks on `y`, `y.retain_grad()` and `autograd.grad(s, y)` see it. Each
// level has its own node, whose next edges are the inputs that require grad and the outputs of
// lower levels; most graphs have one level.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fastdyn::runtime {

struct AutogradPlan {
  size_t num_outputs = 0;             // the graph's outputs: the forward's first outputs; the saved values follow
  // Graph input positions the forward writes into (x.mul_(0.5) on an input that needs no grad).
  // The forward is functional (it reads every input as it was and writes these last): a call where
  // another input shares such an input's memory (a view made before the write, passed beside its
  // base to a continuation) runs the traced graph op by op on ATen instead, with ATen's autograd.
  std::vector<int32_t> written_inputs;
  std::vector<int32_t> output_first;  // per graph output position: the first position of the same value
  // Per graph input: some node reads it or it is an output. The nodes keep (for create_graph's
  // replay) only these: an input the trace passed in but never used must not outlive the call
  // through them, as it does not in eager (difftest seed 37752).
  std::vector<bool> input_used;
  // Per saved value: it is a graph output, which gets a node (or a view of a base with one): it is
  // saved detached, so that a node never holds another node, or itself, through a saved value.
  std::vector<bool> saved_detached;
  // Per saved value: the graph input position whose final contents it is (the forward wrote it into
  // that input: x[1] = 2.0; t = x * w saves x), or -1. The node saves the caller's tensor itself, as
  // eager saves x: an in-place write to it before the backward then raises eager's error.
  std::vector<int32_t> saved_input;
  struct Level {
    std::vector<int32_t> outputs;       // graph output positions whose values get this level's node, in its input order
    std::vector<int32_t> edge_inputs;   // graph input indices that require grad: the node's first next edges
    std::vector<int32_t> edge_outputs;  // graph output positions of lower levels (views included): the next edges after those
    std::vector<int32_t> edge_grad;     // per edge above: the backward output that is its gradient, or -1 (no next edge then)
    std::vector<int32_t> saved;         // the saved values (indices among the forward's extra outputs) its backward reads first
    std::vector<int32_t> eager_saved;   // saved values its eager replay reads after the inputs and lower outputs (dropout masks)
    // Per replay input (the graph's inputs, then the lower outputs, as `edge_outputs`): whether the
    // backward reads its value, itself or through a value computed from it. The node keeps only
    // those for create_graph's replay; the others it watches weakly, so that they die when eager's
    // would (eager's nodes keep only what their backward reads: difftest seed 69644, an output
    // summed into an input kept alive by the node), and the replay gives a dead one a stand-in of
    // its shape, whose values no gradient reads. Empty: keep all.
    std::vector<bool> replay_reads;
  };
  std::vector<Level> levels;
  // Outputs that are views of an input or of a diff output: after the nodes are wired, each is made
  // again as base.as_strided(its sizes, strides, offset) in grad mode, so that autograd sees the view
  // eager returns (in-place updates through it, its gradient through the base).
  struct View {
    int32_t position = -1;  // graph output position
    bool of_input = false;
    int32_t base = -1;      // graph input index, or graph output position of a diff output
    int32_t level = -1;     // its base's level (-1: an input): made before the nodes of higher levels are wired,
                            // whose next edges may name it
  };
  std::vector<View> views;  // by level
};

}  // namespace fastdyn::runtime
