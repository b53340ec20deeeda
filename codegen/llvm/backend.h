// codegen/llvm/backend.h — the `llvm_cpu` backend: a graph compiled to fused, vectorised, threaded
// kernels (codegen/ layer; built only with LLVM 19).
//
// compile_llvm_cpu runs the loop pipeline (codegen/loop/passes.h), plans each kernel and looks its
// plan key (codegen/llvm/emit.h's emit_key) up in a memo of emitted kernels; only on a miss does it
// emit LLVM IR, whose bitcode keys the kernel cache (memory, then disk); only on a miss there does
// it compile. It then
// translates the loop Program into a runtime::Program (runtime/program.h: slots, buffers, kernel
// launches, and extern ATen calls through the aten backend, one node each) whose kernels are
// runtime::HostKernels, and returns the runtime's executor of it (runtime/program_executable.h),
// whose run path has no strings and no maps. describe() is "backend llvm_cpu\n" and the loop
// Program text (explain, FASTDYN_LOG).
#pragma once
#include "codegen/graph/graph.h"
#include "codegen/loop/runtime_program.h"
#include "codegen/passes/graph_passes.h"
#include "runtime/executable.h"

#include <cstdint>
#include <functional>
#include <string>

namespace fastdyn::codegen {

// Throws loop::Unsupported (codegen/loop/passes.h) when the graph cannot run outside ATen at all;
// the caller then uses compile_aten. BackendError: LLVM refused the module.
runtime::ExecutablePtr compile_llvm_cpu(const Graph& g);

// compile_llvm_cpu in two halves, for tiered compilation (runtime/tiered_executable.h).
// prepare_llvm_cpu does the graph passes (constant folding runs ATen ops), the loop pipeline and
// the extern calls on the caller's thread: a few milliseconds; it throws what compile_llvm_cpu
// throws before LLVM. `finish` emits the kernels, looks them up in the kernel cache and compiles
// the missing ones: LLVM only, no ATen op and no Python, so it may run on another thread, once.
// `load_now`, set only when a first call should wait for the kernels rather than run on ATen: a
// record says an earlier process built them all (jit_engine.h's program_recorded), and loading
// them costs less than running the graph's pointwise work op by op (a large graph). It returns
// the executable finish would, from the kernel cache alone, or nullptr (a kernel is missing: the
// disk was pruned, or is shared with another CPU) having compiled nothing; finish is then still
// to run. Runs on the caller's thread; at most one of the two succeeds.
using PreparedLlvm = loop::PreparedKernels;  // load_now set as described above
PreparedLlvm prepare_llvm_cpu(const Graph& g);  // rewrite_graph(g), then the overload below

// Whether a warm start (load_now) could pay for g at all, judged from the graph alone (its values'
// bytes bound what its kernels would read and write): false for a small graph, whose passes may
// then run in the background with its kernels instead of on the caller's thread.
bool llvm_warm_start_may_pay(const Graph& g);

// Kernels this process has emitted as LLVM IR (plan keys the memo did not know), for tests.
int64_t kernels_emitted();
// From the graph-level passes' result (codegen/passes/graph_passes.h): the loop pipeline and the rest.
PreparedLlvm prepare_llvm_cpu(const Graph& original, RewrittenGraph rewritten);

}  // namespace fastdyn::codegen
