// runtime/program.h — a compiled graph as the runtime runs it: slots, buffers, and steps that
// launch kernels or call ATen (runtime/ layer; plain data, no compiler types).
//
// A backend in codegen/ fills a Program once per compile; ProgramExecutable
// (program_executable.h) runs it on every call. Everything a call needs is decided here, as
// numbers: which slot holds each tensor, what to allocate, in which order the steps run and
// which layout each tensor must have. The executor reads no graph, no IR and no strings.
//
// Slots are the call's tensors, by number: the caller's inputs and the program's constants go in
// first, then buffers are allocated (on the buffer's device, through ATen, so CUDA buffers come
// from PyTorch's caching allocator), then each step reads slots and fills others. A value that
// is a view (a graph value aliasing another's storage, or a value in a slot reused from a buffer
// of another shape) is never a slot of its own: SlotTensor says how to view its slot.
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "runtime/executable.h"
#include "runtime/kernel.h"

namespace fastdyn::runtime {

// How a step's input or a program output is made from a slot (slot_view): the slot's tensor as
// it is, or, with `view`, t.as_strided(sizes, strides, t.storage_offset() + offset_delta).
struct SlotTensor {
  int32_t slot = -1;
  bool view = false;
  std::vector<int64_t> sizes, strides;  // view only
  int64_t offset_delta = 0;             // view only, in elements
};

inline at::Tensor slot_view(const SlotTensor& s, const std::vector<at::Tensor>& slots) {
  const at::Tensor& t = slots[static_cast<size_t>(s.slot)];
  if (!s.view) return t;
  return t.as_strided(s.sizes, s.strides, t.storage_offset() + s.offset_delta);
}

// A tensor the program holds itself (a folded constant), placed in `slot` on every call.
struct Constant {
  int32_t slot = -1;
  at::Tensor value;
};

// A tensor allocated on every call, before the first step, for kernels to write.
struct Buffer {
  int32_t slot = -1;
  std::vector<int64_t> sizes, strides;
  at::TensorOptions options;  // dtype and device
  int32_t alloc_step = 0;     // allocated just before this step
};

// A kernel launch: args[i] is the slot whose data pointer is the kernel's i-th argument, sizes[j]
// the value of its j-th size parameter at the sizes this program was built for (empty: a kernel
// whose sizes are all constants). One compiled kernel serves programs of many sizes.
struct KernelLaunch {
  std::shared_ptr<const Kernel> kernel;
  std::vector<int32_t> args;
  std::vector<int64_t> sizes;
};

// Where an extern call's result goes, and the layout the kernels that read it expect. A result
// with other strides is copied into that layout (ATen may return, say, a channels-last tensor
// where the graph's metadata said contiguous); slot -1: nothing reads it.
struct ExternResult {
  int32_t slot = -1;
  std::vector<int64_t> sizes, strides;
};

// An ATen call (an op the backend does not lower, through the dispatcher): `exe` runs on the
// tensors of `inputs` and returns one tensor per entry of `outputs`.
struct ExternCall {
  ExecutablePtr exe;
  std::vector<SlotTensor> inputs;
  std::vector<ExternResult> outputs;
};

using Step = std::variant<KernelLaunch, ExternCall>;

// A caller's input that the kernels write in place. After a successful call its version counter
// is bumped once per in-place op, as eager does.
struct MutatedInput {
  int32_t input = -1;  // position in the caller's inputs
  int32_t version_bumps = 1;
};

struct CheckPlan;  // accuracy_check.h

struct Program {
  std::string backend;  // "llvm_cpu": describe()'s first line, and error messages
  std::string text;     // the backend's program, for describe() (explain, FASTDYN_LOG=code)
  int32_t num_slots = 0;
  std::vector<int32_t> input_slots;  // the slot of each caller input, in the caller's order
  std::vector<Constant> constants;
  std::vector<Buffer> buffers;
  std::vector<Step> steps;            // in order
  std::vector<std::vector<int32_t>> release_after;  // per step (or empty): the slots nothing reads after it
  std::vector<SlotTensor> outputs;    // the program's results, in order
  std::vector<MutatedInput> mutated_inputs;
  bool extern_writes_inputs = false;  // an extern step writes an input in place (not last: a failure after it leaves it written)
  // The original graph on ATen, op by op: it runs instead of the steps when a mutated input
  // shares memory with another input, or when a step throws (program_executable.h says why).
  // Required when mutated_inputs is not empty.
  ExecutablePtr aliased;
  // Accuracy mode (accuracy_check.h): set only when the program was built with the mode on.
  std::shared_ptr<const CheckPlan> check;
};

// Throws InternalError naming the first inconsistency (a slot out of range, a launch without a
// kernel, a mutated input without the aliased fallback...): checked once, so that the executor
// indexes slots unchecked on every call.
void check_program(const Program& p);

}  // namespace fastdyn::runtime
