// runtime/autograd_function.h — a compiled graph whose outputs require grad (runtime/ layer).
//
// Each call runs the compiled forward outside grad mode, then wires its outputs to an autograd
// node per level (CompiledFunctionBackward; autograd_plan.h says what levels are) whose next edges
// are the inputs that require grad and the lower levels' outputs, holding the saved values as
// autograd SavedVariables (detached: a node never holds another node through them): `loss.backward()`, `torch.autograd.grad`, hooks on the
// inputs and outputs, `retain_graph`, accumulation into `.grad` and eager's errors (a saved tensor
// modified in place, a second backward through freed buffers) all come from autograd itself.
// The node's apply runs the compiled backward (codegen/autograd/joint.h) on the saved values and the
// incoming gradients (none reaching an output: zeros). With create_graph=True the gradients must
// themselves be differentiable, which a compiled backward is not: the node then replays the traced
// graph on ATen from the inputs it kept, with grad mode on, and differentiates that (eager's ops,
// so double backward is eager's); those inputs are checked unchanged, as eager checks saved ones.
#pragma once
#include "runtime/autograd_plan.h"
#include "runtime/executable.h"

#include <vector>

namespace fastdyn::runtime {

// `forward` returns plan.num_outputs outputs then the saved values. Per level, `backward` takes
// its saved values then one gradient per level output, and returns one per next edge that gets
// one; `eager` is the traced graph on ATen from the graph's inputs, the lower levels' outputs and
// the dropout masks of the call, returning the level's outputs (create_graph).
struct LevelExecutables {
  ExecutablePtr backward, eager;
};
// `aliased`: the traced graph on ATen, for calls where an input the forward writes into shares
// memory with another input (required when plan.written_inputs is not empty).
ExecutablePtr make_autograd_executable(ExecutablePtr forward, std::vector<LevelExecutables> levels, AutogradPlan plan,
                                       ExecutablePtr aliased = nullptr);

}  // namespace fastdyn::runtime
