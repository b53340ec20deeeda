// runtime/deferred_executable.cpp — see deferred_executable.h.
#include "runtime/deferred_executable.h"

#include "runtime/errors.h"

namespace fastdyn::runtime {

DeferredExecutable::DeferredExecutable(ExecutablePtr baseline, std::function<bool()> ready,
                                       std::function<ExecutablePtr()> build, std::string pending)
    : baseline_(std::move(baseline)), ready_(std::move(ready)), build_(std::move(build)), pending_(std::move(pending)) {
  FD_CHECK(baseline_ != nullptr && ready_ && build_, "a deferred executable needs a baseline, ready and build");
}

std::vector<at::Tensor> DeferredExecutable::run(const std::vector<at::Tensor>& inputs) {
  if (Executable* real = built_.load(std::memory_order_acquire)) return real->run(inputs);
  if (ready_()) {
    std::unique_lock<std::mutex> lock(build_mutex_);
    if (!built_owner_) {
      built_owner_ = build_();
      FD_CHECK(built_owner_ != nullptr, "a deferred executable's build returned nothing");
      built_.store(built_owner_.get(), std::memory_order_release);
    }
    lock.unlock();
    return built_.load(std::memory_order_acquire)->run(inputs);
  }
  return baseline_->run(inputs);
}

std::string DeferredExecutable::describe() const {
  if (const Executable* real = built_.load(std::memory_order_acquire)) return real->describe();
  return pending_;
}

}  // namespace fastdyn::runtime
