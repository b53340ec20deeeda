// runtime/host_kernel.cpp — see host_kernel.h.
#include "runtime/host_kernel.h"

#include "runtime/errors.h"

namespace fastdyn::runtime {

HostKernel::HostKernel(Function fn, std::shared_ptr<void> hold, std::string backend)
    : fn_(fn), hold_(std::move(hold)), backend_(std::move(backend)) {
  FD_CHECK(fn_ != nullptr, "host kernel without a function");
}

void HostKernel::launch(void** args, const int64_t* sizes) const {
  int32_t status = 0;
  fn_(args, &status, sizes);
  if (status != 0) throw BackendError(backend_ + ": index out of range in self (embedding / index_select)");
}

}  // namespace fastdyn::runtime
