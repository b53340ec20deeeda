// codegen/aten/held_weight.cpp — HeldWeight (see held_weight.h).
#include "codegen/aten/held_weight.h"

#include <cstdlib>
#include <string>

namespace fastdyn::codegen {

bool held_weights_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("FASTDYN_PREPACK");
    return !(env && std::string(env) == "0");
  }();
  return enabled;
}

HeldWeight::Seen HeldWeight::Seen::of(const at::Tensor& w) {
  Seen s{w, w.data_ptr(), w._version()};
  const auto* words = static_cast<const uint32_t*>(w.data_ptr());
  const int64_t n = w.numel();
  for (int i = 0; n > 0 && i < kSamples; ++i) s.bits[static_cast<size_t>(i)] = words[(n - 1) * i / (kSamples - 1)];
  return s;
}

bool HeldWeight::Seen::same_as(const Seen& o) const {
  return o.tensor.defined() && tensor.is_same(o.tensor) && data == o.data && version == o.version && bits == o.bits;
}

at::Tensor HeldWeight::get(const at::Tensor& w, const std::function<at::Tensor()>& make) {
  const Seen now = Seen::of(w);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!(made_.defined() && now.same_as(made_for_))) {
    if (now.same_as(seen_)) {  // unchanged over two calls: derive it
      made_ = make();
      made_for_ = now;
    } else {
      seen_ = now;  // first sight of this weight, or it changed: the weight itself this time
      return at::Tensor();
    }
  }
  return made_;
}

}  // namespace fastdyn::codegen
