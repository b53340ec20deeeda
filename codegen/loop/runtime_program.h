// codegen/loop/runtime_program.h — a planned loop Program as the runtime runs it
// (runtime/program.h): slots, buffers, extern ATen calls and kernel launches (codegen/ layer;
// backend-neutral: every compiling backend translates its Program here and fills in its kernels).
#pragma once
#include "codegen/loop/loop_ir.h"
#include "runtime/program.h"

#include <functional>
#include <string>
#include <vector>

namespace fastdyn::codegen::loop {

// How the runtime makes value v from the slots: its slot's tensor, or a view of it (an alias of
// its root; a buffer in a slot first allocated for a value of another shape). InternalError when
// v is never materialised.
runtime::SlotTensor slot_tensor(const Program& p, const std::string& backend, ValueId v);

// An op the kernels do not compute: the aten backend (or, on CPU, aten/prepacked_linear.h or
// aten/channels_last_conv.h) runs its node, alone.
struct Extern {
  runtime::ExecutablePtr exe;
  std::vector<ValueId> inputs;
  bool prepacked = false;  // a held weight (prepacked_linear.h, channels_last_conv.h), not the aten backend
};
Extern compile_extern(const Graph& g, const Node& n);

// The runtime program of `p` for backend `backend` (its name, for describe() and errors): one step
// for each of p.steps, but each kernel launch's kernel and sizes are left empty, for the backend
// to set once the kernels are compiled. `externs` are p's Extern steps in order; folded
// `constants` are the graph's last inputs. In accuracy mode (runtime/accuracy_check.h) the program
// carries its check plan (check_plan.h).
runtime::Program runtime_program(const Program& p, const std::string& backend, std::string text, std::vector<Extern> externs,
                                 std::vector<at::Tensor> constants, runtime::ExecutablePtr aliased);

// A graph prepared by a compiling backend (llvm_cpu, cuda), before its kernels are built:
// codegen/backends/ hands it on as its PreparedGraph.
struct PreparedKernels {
  std::string program;  // what the finished executable's describe() will say
  // Builds the kernels (memory cache, disk, else compile) and returns the executable; may run on
  // a worker thread, once. Throws BackendError/InternalError.
  std::function<runtime::ExecutablePtr()> finish;
  // May be empty: serves a first call from the disk cache at once (a warm start), or returns
  // nullptr having compiled nothing; throws what finish throws.
  std::function<runtime::ExecutablePtr()> load_now;
  // The executable from kernels built before (the memory cache, then the disk), or nullptr having
  // compiled nothing: for a caller that expects them built (a dynamic entry at a new size, whose
  // kernels mostly do not depend on it). Not gated like load_now; at most one of the three succeeds.
  std::function<runtime::ExecutablePtr()> from_cache;
};

}  // namespace fastdyn::codegen::loop
