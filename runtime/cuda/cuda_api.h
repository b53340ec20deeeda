// runtime/cuda/cuda_api.h — the CUDA driver API and NVRTC, loaded at run time (runtime/ layer).
//
// Neither is linked: both are found with dlopen when first asked for, so that fastdyn builds,
// imports and runs on a machine without CUDA (then available() is false and the cuda backend is
// not offered). NVRTC is searched for in the directories the Python package registers (the
// `nvidia-cuda-nvrtc` wheel that a CUDA build of torch depends on, add_library_dir), then under
// the loader's own search path (a CUDA toolkit); FASTDYN_NVRTC names a library file to use instead.
// No CUDA header is needed: the few handle types are declared here as opaque pointers.
//
// The driver's calls run in the primary context of the kernel's device, the one PyTorch's runtime
// API uses, so modules loaded here serve PyTorch's streams. Errors throw BackendError with the
// driver's or NVRTC's message.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fastdyn::runtime::cuda {

using CUfunction = struct CUfunc_st*;
using CUmodule = struct CUmod_st*;
using CUstream = struct CUstream_st*;

// NVRTC alone (compiling needs no GPU): true when the library loads.
bool nvrtc_available();
// "13.0" (major.minor), or "" when NVRTC is missing.
std::string nvrtc_version();
// The driver and at least one device.
bool driver_available();
// NVRTC and the driver: what the cuda backend needs to run a kernel.
inline bool available() { return nvrtc_available() && driver_available(); }
// A directory to search for libnvrtc before the loader's path (the Python package registers the
// nvidia wheels' lib directories at import). Takes effect if NVRTC has not been loaded yet.
void add_library_dir(const std::string& dir);
// Where NVRTC was loaded from, or why it was not (for errors and `fastdyn.backends()`).
std::string nvrtc_origin();

// The options every NVRTC compile gets besides the architecture (part of the kernel cache's
// identity: they change the binary): C++17, device code by default, no fast-math (precise expf,
// logf, division and sqrt, as ATen's kernels); `-minimal` where NVRTC takes it (none of the CUDA
// runtime's texture, launch or device-runtime declarations, which the kernels never use: about
// 5 ms less per kernel on an H200 host, 11.8 -> 6.6 ms for an empty one); then the words of
// FASTDYN_NVRTC_OPTIONS (for measuring: bench/nvrtc_options.py). Not passed: --Ofast-compile,
// which cut the mean compile by a third but made the kernels 1.8x (mid) to 10x (max) slower.
const std::vector<std::string>& nvrtc_options();
// CUDA C++ compiled by NVRTC for sm_<arch> (90 for an H100): a CUBIN when `cubin`, else PTX for
// compute_<arch>, with nvrtc_options() and then `extra`. `name` names the program in NVRTC's log.
// Throws BackendError with the log.
std::string nvrtc_compile(const std::string& source, const std::string& name, int arch, bool cubin,
                          const std::vector<std::string>& extra = {});

struct DeviceInfo {
  int arch = 0;          // 10 * major + minor: 90 for an H100
  int multiprocessors = 0;
  int max_threads_per_block = 0;
};
DeviceInfo device_info(int device);

// A loaded module (CUBIN or PTX) and its one kernel function, in device `device`'s primary
// context. Unloads itself when destroyed, except while a CUDA graph is being captured (below).
class LoadedKernel {
 public:
  LoadedKernel(const std::string& image, const std::string& symbol, int device);
  ~LoadedKernel();
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;
  CUfunction function() const { return fn_; }
  int device() const { return device_; }

 private:
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
  int device_ = 0;
};

// CUDA graph captures in progress (python/fastdyn/_cuda_graphs.py brackets each capture with
// these). cuModuleUnload during a capture invalidates it, from the capturing thread in any
// capture mode and from any thread in the global one (measured on an H200): a LoadedKernel
// destroyed meanwhile (the background compiler's cache evicting, a collected executable) is
// unloaded when the last capture ends. Loading needs no such care.
void begin_graph_capture();
void end_graph_capture();

// cuLaunchKernel on `stream` (1-d grid and block); params[i] points at the i-th argument's value.
void launch(CUfunction fn, int64_t grid, int block, int shared_bytes, CUstream stream, void** params, int device);

}  // namespace fastdyn::runtime::cuda
