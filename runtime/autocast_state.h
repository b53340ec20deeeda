// runtime/autocast_state.h — torch.autocast's thread-local state, as one value (runtime/ layer).
//
// A trace records it (codegen/capture/autocast.h casts as eager's autocast would under it) and
// the entry's guards check that a call sees the same (guards.cpp): a graph traced with autocast
// off never runs under it, and one traced under bfloat16 autocast on the CPU only under that.
#pragma once
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace fastdyn::runtime {

struct AutocastState {
  // Enabled per device type, and each device type's autocast dtype (set also while off: it is
  // the default dtype of a torch.autocast(device) made without one).
  bool cpu = false, cuda = false;
  c10::ScalarType cpu_dtype = c10::ScalarType::BFloat16, cuda_dtype = c10::ScalarType::Half;

  static AutocastState current();  // the calling thread's (autocast_state.cpp)
  bool any() const { return cpu || cuda; }
  // Whether autocast casts for tensors of this device type, and to which lower-precision dtype.
  bool on(c10::DeviceType t) const { return t == c10::DeviceType::CPU ? cpu : t == c10::DeviceType::CUDA && cuda; }
  c10::ScalarType dtype(c10::DeviceType t) const { return t == c10::DeviceType::CPU ? cpu_dtype : cuda_dtype; }
  bool operator==(const AutocastState& o) const {
    return cpu == o.cpu && cuda == o.cuda && cpu_dtype == o.cpu_dtype && cuda_dtype == o.cuda_dtype;
  }
  bool operator!=(const AutocastState& o) const { return !(*this == o); }
  // "autocast off", "autocast cpu BFloat16", "autocast cpu BFloat16, cuda Half".
  std::string describe() const;
};

}  // namespace fastdyn::runtime
