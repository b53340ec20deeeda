// runtime/program_executable.h — the executor of a runtime::Program (program.h), for every
// backend that compiles to kernels (runtime/ layer).
//
// A call places the inputs and constants in their slots, allocates the buffers, runs the steps in
// order (kernel launches through runtime::Kernel, extern ATen calls with their results brought to
// the layout the kernels expect), and returns the outputs. Its path builds no string and reads no
// map: a vector of slots, one of kernel arguments, and per extern call one of its inputs.
//
// In-place updates of the caller's tensors: the kernels read every input as it was and write the
// mutated ones last, which is right only when no other input shares a mutated one's memory
// (f(x, x), f(x, x[1:])); such calls run the program's `aliased` fallback, the recorded graph op by
// op on ATen, which mutates exactly as eager. So do calls where a step throws (x.add_(1);
// x[bad_index]): eager raises with x already written, and ATen replays the ops, mutation and
// error included; unless the eval hook will redo the whole frame eagerly (graph_calls.h:
// redo_if_untouched), which also gives eager's effects of the frame's code before the failing
// op: then the error propagates with the inputs untouched. After a successful call the mutated
// inputs' version counters are bumped.
//
// Accuracy mode (accuracy_check.h): a program built with a check plan, called while the mode is
// on, compares each kernel's values with ATen's as the steps run; otherwise its calls test one
// pointer more.
#pragma once
#include <string>
#include <vector>

#include "runtime/executable.h"
#include "runtime/program.h"

namespace fastdyn::runtime {

class CheckedCall;  // accuracy_check.h

// Whether an input that the call writes into (`written`: input positions) shares memory with
// another input: then a functional plan (read every input, write the written ones last) is wrong,
// and the call must run the recorded graph op by op, as eager does.
bool overlaps_a_written_input(const std::vector<at::Tensor>& inputs, const std::vector<int32_t>& written);

class ProgramExecutable final : public Executable {
 public:
  explicit ProgramExecutable(Program p);  // throws InternalError on an inconsistent program

  // UserError when the number of inputs is not the program's; what the steps throw otherwise
  // (BackendError from a kernel, c10::Error from ATen), unless the aliased fallback runs instead.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) override;
  // Drops each input after its last reader (see Executable), unless the program writes into an
  // input or accuracy mode is on.
  std::vector<at::Tensor> run_taking(std::vector<at::Tensor>&& inputs) override;
  std::string describe() const override;  // "backend <name>\n" + the program text

 private:
  std::vector<at::Tensor> run_steps(const std::vector<at::Tensor>& inputs) const;
  // kChecked: accuracy mode's call (accuracy_check.h), which compares each kernel's values.
  template <bool kChecked>
  std::vector<at::Tensor> run_steps_as(const std::vector<at::Tensor>& inputs) const;
  std::vector<at::Tensor> constant_slots() const;  // a call's slots, its constants placed
  // Runs the steps on `slots` (inputs and constants placed; buffers and results filled in here).
  template <bool kChecked>
  std::vector<at::Tensor> execute(std::vector<at::Tensor>& slots, CheckedCall* check) const;
  void run_step(const Step& step, std::vector<at::Tensor>& slots, std::vector<void*>& args) const;
  Program p_;
  std::vector<int32_t> written_;  // p_.mutated_inputs' input positions
  size_t max_kernel_args_ = 0;
  std::vector<size_t> buffers_by_step_;  // indices into p_.buffers, by allocation step
};

}  // namespace fastdyn::runtime
