// runtime/host_kernel.cpp — see host_kernel.h.
#include "runtime/host_kernel.h"

#include "runtime/errors.h"

#include <c10/util/Exception.h>

namespace fastdyn::runtime {

HostKernel::HostKernel(Function fn, std::shared_ptr<void> hold, std::string backend)
    : fn_(fn), hold_(std::move(hold)), backend_(std::move(backend)) {
  FD_CHECK(fn_ != nullptr, "host kernel without a function");
}

void HostKernel::launch(void** args, const int64_t* sizes) const {
  int32_t status = 0;
  fn_(args, &status, sizes);
  // The user's op failing as eager's would (ATen raises IndexError here), not fastdyn's own error.
  if (status != 0) throw c10::IndexError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                         backend_ + ": index out of range in self (embedding / index_select)");
}

}  // namespace fastdyn::runtime
