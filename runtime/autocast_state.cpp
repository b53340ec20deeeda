// runtime/autocast_state.cpp — see autocast_state.h.
#include "runtime/autocast_state.h"

#include <ATen/autocast_mode.h>

namespace fastdyn::runtime {

AutocastState AutocastState::current() {
  AutocastState s;
  s.cpu = at::autocast::is_autocast_enabled(at::kCPU);
  s.cuda = at::autocast::is_autocast_enabled(at::kCUDA);
  // NB: also while off: `torch.autocast("cuda")` without a dtype reads it, and a trace may make one.
  s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
  s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
  return s;
}

std::string AutocastState::describe() const {
  if (!any()) return "autocast off";
  std::string s = "autocast";
  if (cpu) s += std::string(" cpu ") + c10::toString(cpu_dtype);
  if (cuda) s += std::string(cpu ? ", cuda " : " cuda ") + c10::toString(cuda_dtype);
  return s;
}

}  // namespace fastdyn::runtime
