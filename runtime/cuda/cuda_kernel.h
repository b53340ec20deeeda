// runtime/cuda/cuda_kernel.h — a kernel compiled for an NVIDIA GPU, launched on PyTorch's current
// stream of its device (runtime/ layer; the runtime::Kernel the cuda backend builds).
//
// The kernel's parameters are its tensors' data pointers, then its size parameters (int64), in
// the order the backend fixed (runtime::KernelLaunch). Its grid depends on the sizes of the launch:
// `work` units (elements of a pointwise kernel, rows of a reduction) are a product of polynomials
// in the size parameters, evaluated at each launch, and the grid covers them up to a cap beyond
// which the kernel's grid-stride loop takes over. Launches are asynchronous, as eager's are: a
// failure inside the kernel (a gathered index out of range: a device-side trap, as ATen's assert)
// surfaces at the next synchronising call, with CUDA's own message.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/cuda/cuda_api.h"
#include "runtime/kernel.h"

namespace fastdyn::runtime::cuda {

struct LaunchShape {
  struct Term {
    int64_t coef = 1;
    std::vector<int32_t> params;  // positions in the launch's sizes; coef * their product
  };
  std::vector<std::vector<Term>> work;  // the product of these sums (empty: 1)
  int64_t per_block = 1;                // work units one block takes per grid-stride pass
  int64_t max_grid = 65535;
  int block = 256;
  int shared_bytes = 0;
  // Split reductions (codegen/cuda/emit_cuda.h): work units are rows x split; each launch passes
  // a zeroed workspace of units * split_reductions * 8 bytes of partials and a u32 counter per row
  // as the kernel's last parameter (from PyTorch's caching allocator, on the launch's stream).
  int64_t split = 0;
  int split_reductions = 0;

  int64_t work_units(const int64_t* sizes) const;
  int64_t grid(const int64_t* sizes) const;  // 0: nothing to do
};

// A CPU scalar the kernel takes by value, after its size parameters: `bytes` bytes at
// `byte_offset` into pointer argument `arg`'s memory (host memory), read at each launch, when the
// steps before it (on the host, in program order) have written it.
struct HostRead {
  int32_t arg = -1;
  int64_t byte_offset = 0;
  int32_t bytes = 4;
};

class CudaKernel final : public Kernel {
 public:
  CudaKernel(std::shared_ptr<const LoadedKernel> code, LaunchShape shape, int num_args, int num_sizes,
             std::vector<HostRead> host = {});
  void launch(void** args, const int64_t* sizes) const override;
  const LaunchShape& shape() const { return shape_; }

 private:
  std::shared_ptr<const LoadedKernel> code_;
  LaunchShape shape_;
  int num_args_, num_sizes_;
  std::vector<HostRead> host_;
};

}  // namespace fastdyn::runtime::cuda
