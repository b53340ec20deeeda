// runtime/kernel.h — a compiled kernel, ready to launch: the interface every backend's kernels
// implement (runtime/ layer; no backend, no compiler here).
//
// A runtime::Program (program.h) launches its kernels through this interface alone, so the
// executor never knows which backend built them. ARCHITECTURE.md calls the seam a
// "KernelLauncher"; it is one object per compiled kernel that launches itself, rather than a
// per-backend launcher handed an opaque kernel handle, because everything a launch needs is per
// kernel and fixed at compile time: the entry point, what keeps its code loaded, its launch
// geometry. A launcher object apart would hold no state and would need the same type-erased
// handle back on every call.
//
// Implementations: HostKernel (host_kernel.h), a host function called directly on the calling
// thread (llvm_cpu's kernels take ATen's thread pool from inside, runtime/parallel.h). A CUDA
// kernel will hold its CUfunction, its module and grid, and the device it was built for, and
// launch on PyTorch's current stream of that device (c10::cuda::getCurrentCUDAStream(device)),
// asynchronously; its error status would then live in device memory, checked where the program
// synchronises anyway, not by a copy back on every launch.
#pragma once
#include <cstdint>

namespace fastdyn::runtime {

class Kernel {
 public:
  virtual ~Kernel() = default;
  // args[i] is the data pointer of the kernel's i-th tensor argument (nullptr for an undefined
  // tensor), in the order the backend fixed when it compiled the kernel (Program's KernelLaunch).
  // `sizes` are the values of the kernel's size parameters (ARCHITECTURE "Sizes are symbols"): a
  // kernel compiled once for a symbolic size reads the size of this launch from here, in the
  // order the backend fixed (KernelLaunch::sizes); nullptr when it has none.
  // Throws fastdyn::BackendError when the kernel reports a failure (an index out of range).
  virtual void launch(void** args, const int64_t* sizes) const = 0;
};

}  // namespace fastdyn::runtime
