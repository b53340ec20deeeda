// codegen/cuda/backend.h — the `cuda` backend: a graph on one NVIDIA GPU compiled to fused kernels
// (codegen/ layer; always built: NVRTC and the driver are loaded at run time, runtime/cuda/).
//
// prepare_cuda runs the loop pipeline (the same lowering, fusion and memory plan as llvm_cpu),
// writes each kernel's CUDA C++ (emit_cuda.h) and compiles the extern ATen calls (matmul, conv,
// sdpa: cuBLAS and cuDNN through ATen) on the caller's thread; `finish` compiles the kernels with
// NVRTC to a CUBIN for the device's architecture, several at once, through a memory cache and the
// disk cache (runtime/kernel_cache.h, keyed by the source, the GPU architecture, NVRTC's version
// and the fastdyn build), loads them into the device's primary context and returns the runtime's
// executor of the program (runtime/program_executable.h), whose kernels launch on PyTorch's
// current stream. No ATen op and no Python in finish: it may run on a worker thread.
#pragma once
#include "codegen/graph/graph.h"
#include "codegen/loop/runtime_program.h"
#include "codegen/passes/graph_passes.h"
#include "runtime/executable.h"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

namespace fastdyn::codegen {

using PreparedCuda = loop::PreparedKernels;  // no load_now: a first call runs on ATen while kernels load
// Throws loop::Unsupported when a kernel has no cuda form yet (the graph runs on aten).
PreparedCuda prepare_cuda(const Graph& original, RewrittenGraph rewritten);

// The CUDA C++ of every kernel of g's loop program, in order (tests, FASTDYN_DUMP=cuda).
std::vector<std::string> cuda_sources(const Graph& g);

struct CudaCompileStats {
  int64_t compiled = 0, memory_hits = 0, disk_hits = 0;
  double compile_ms = 0;  // NVRTC time, summed over kernels
};
CudaCompileStats cuda_compile_stats();

// The compile routes of issue 20, timed on the kernels this process compiled (bench/gpu_kernels.py):
// route 1 is NVRTC to a CUBIN (what the backend does); route 2 would emit PTX directly and have
// the driver assemble it, which costs at least the driver's PTX load (its ptxas) of the PTX that
// NVRTC gives for the same kernel. `extra` NVRTC options go after the backend's own
// (bench/nvrtc_options.py compares option sets).
struct RouteTiming {
  double nvrtc_cubin_ms = 0, nvrtc_ptx_ms = 0, driver_ptx_load_ms = 0, driver_cubin_load_ms = 0;
};
std::vector<RouteTiming> cuda_route_timings(const std::vector<std::string>& extra = {});
// The sources this process compiled (newest last, bounded as above) with their devices: what
// bench/nvrtc_options.py compiles again through runtime/cuda/cuda_api.h's nvrtc_compile.
std::vector<std::pair<std::string, int>> cuda_compiled_sources();

}  // namespace fastdyn::codegen
