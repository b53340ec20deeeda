// runtime/cuda/cuda_kernel.cpp — see cuda_kernel.h.
#include "runtime/cuda/cuda_kernel.h"

#include <ATen/ATen.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cstring>

#include "runtime/errors.h"

namespace fastdyn::runtime::cuda {
namespace {
constexpr int kMaxParams = 512;
}  // namespace

int64_t LaunchShape::work_units(const int64_t* sizes) const {
  int64_t total = 1;
  for (const std::vector<Term>& factor : work) {
    int64_t sum = 0;
    for (const Term& t : factor) {
      int64_t v = t.coef;
      for (int32_t p : t.params) v *= sizes[p];
      sum += v;
    }
    total *= sum;
  }
  return total;
}

int64_t LaunchShape::grid(const int64_t* sizes) const {
  const int64_t units = work_units(sizes);
  if (units <= 0) return 0;
  return std::min((units + per_block - 1) / per_block, max_grid);
}

CudaKernel::CudaKernel(std::shared_ptr<const LoadedKernel> code, LaunchShape shape, int num_args, int num_sizes,
                       std::vector<HostRead> host)
    : code_(std::move(code)), shape_(std::move(shape)), num_args_(num_args), num_sizes_(num_sizes), host_(std::move(host)) {
  FD_CHECK(num_args_ + num_sizes_ + static_cast<int>(host_.size()) <= kMaxParams, "cuda kernel: too many parameters");
  for (const HostRead& h : host_) FD_CHECK(h.arg >= 0 && h.arg < num_args_ && h.bytes <= 8, "cuda kernel: a host value out of range");
}

void CudaKernel::launch(void** args, const int64_t* sizes) const {
  const int64_t grid = shape_.grid(sizes);
  if (grid == 0) return;
  const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(code_->device()));
  const c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device);
  // Each parameter's value: the pointer args[i] itself, then sizes[j] (cuLaunchKernel copies them).
  // NB: a group of kernels (codegen/cuda/horizontal.h) takes up to 480 pointers.
  void* params[kMaxParams + 1];
  uint64_t host_values[kMaxParams];
  for (int i = 0; i < num_args_; ++i) params[i] = &args[i];
  for (int j = 0; j < num_sizes_; ++j) params[num_args_ + j] = const_cast<int64_t*>(&sizes[j]);
  int next = num_args_ + num_sizes_;
  for (size_t j = 0; j < host_.size(); ++j) {
    host_values[j] = 0;
    std::memcpy(&host_values[j], static_cast<const char*>(args[host_[j].arg]) + host_[j].byte_offset, static_cast<size_t>(host_[j].bytes));
    params[next++] = &host_values[j];
  }
  at::Tensor workspace;
  void* ws = nullptr;
  if (shape_.split > 0) {
    const int64_t units = shape_.work_units(sizes);
    workspace = at::zeros({units * shape_.split_reductions * 8 + (units / shape_.split) * 4},
                          at::TensorOptions().dtype(at::kByte).device(device));
    ws = workspace.data_ptr();
    params[next] = &ws;
  }
  cuda::launch(code_->function(), grid, shape_.block, shape_.shared_bytes, static_cast<CUstream>(stream.native_handle()), params,
               code_->device());
}

}  // namespace fastdyn::runtime::cuda
