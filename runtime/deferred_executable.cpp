// runtime/deferred_executable.cpp — see deferred_executable.h.
#include "runtime/deferred_executable.h"

#include "runtime/errors.h"

namespace fastdyn::runtime {

DeferredExecutable::DeferredExecutable(ExecutablePtr baseline, std::function<bool()> ready,
                                       std::function<ExecutablePtr()> build, std::string pending)
    : baseline_(std::move(baseline)), ready_(std::move(ready)), build_(std::move(build)), pending_(std::move(pending)) {
  FD_CHECK(baseline_ != nullptr && ready_ && build_, "a deferred executable needs a baseline, ready and build");
}

Executable& DeferredExecutable::current() {
  if (Executable* real = built_.load(std::memory_order_acquire)) return *real;
  if (ready_()) {
    std::lock_guard<std::mutex> lock(build_mutex_);
    if (!built_owner_) {
      built_owner_ = build_();
      FD_CHECK(built_owner_ != nullptr, "a deferred executable's build returned nothing");
      built_.store(built_owner_.get(), std::memory_order_release);
    }
    return *built_owner_;
  }
  return *baseline_;
}

std::string DeferredExecutable::describe() const {
  if (const Executable* real = built_.load(std::memory_order_acquire)) return real->describe();
  return pending_ + "\n" + baseline_->describe();
}

}  // namespace fastdyn::runtime
