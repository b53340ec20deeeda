// runtime/host_kernel.h — a kernel that is a host function of the C ABI
// `void fn(void** args, int32_t* status, const int64_t* sizes)` (runtime/ layer): what llvm_cpu
// compiles.
//
// launch() calls it directly on the calling thread; the function takes threads from ATen's pool
// itself (runtime/parallel.h). The function sets *status non-zero when a gathered index was out
// of range (embedding, index_select), and launch() then throws the BackendError eager's message
// resembles, naming the backend. `hold` keeps the function's code loaded while the kernel lives
// (llvm_cpu: its JIT module, which the kernel cache may otherwise evict and unlink).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/kernel.h"

namespace fastdyn::runtime {

class HostKernel final : public Kernel {
 public:
  using Function = void (*)(void** args, int32_t* status, const int64_t* sizes);

  // `backend` names the backend in the error message ("llvm_cpu").
  HostKernel(Function fn, std::shared_ptr<void> hold, std::string backend);

  void launch(void** args, const int64_t* sizes) const override;

 private:
  Function fn_;
  std::shared_ptr<void> hold_;
  std::string backend_;
};

}  // namespace fastdyn::runtime
