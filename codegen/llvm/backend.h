// codegen/llvm/backend.h — the `llvm_cpu` backend: a graph compiled to fused, vectorised, threaded
// kernels (codegen/ layer; built only with LLVM 19).
//
// compile_llvm_cpu runs the loop pipeline (codegen/loop/passes.h), looks the printed Program up in
// the kernel cache (memory, then disk) and only on a miss emits and compiles LLVM IR. The
// Executable it returns allocates the planned buffers, calls the kernels in order with extern
// ATen calls (through the aten backend, one node each) between them, and returns the outputs;
// its run path has no strings and no maps. describe() is the Program text (explain, FASTDYN_LOG).
#pragma once
#include "codegen/graph.h"
#include "runtime/executable.h"

namespace fastdyn::codegen {

// Throws loop::Unsupported (codegen/loop/passes.h) when the graph cannot run outside ATen at all;
// the caller then uses compile_aten. BackendError: LLVM refused the module.
runtime::ExecutablePtr compile_llvm_cpu(const Graph& g);

}  // namespace fastdyn::codegen
