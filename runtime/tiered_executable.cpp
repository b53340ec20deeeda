// runtime/tiered_executable.cpp — see tiered_executable.h.
#include "runtime/tiered_executable.h"

#include "runtime/background_compiler.h"
#include "runtime/journal.h"
#include "runtime/errors.h"

namespace fastdyn::runtime {

TieredExecutable::TieredExecutable(ExecutablePtr baseline, std::string pending)
    : baseline_(std::move(baseline)), pending_(std::move(pending)) {
  FD_CHECK(baseline_ != nullptr, "a tiered executable needs a baseline");
}

std::vector<at::Tensor> TieredExecutable::run(const std::vector<at::Tensor>& inputs) {
  if (Executable* fast = optimised_.load(std::memory_order_acquire)) return fast->run(inputs);
  return baseline_->run(inputs);
}

std::vector<at::Tensor> TieredExecutable::run_taking(std::vector<at::Tensor>&& inputs) {
  if (Executable* fast = optimised_.load(std::memory_order_acquire)) return fast->run_taking(std::move(inputs));
  return baseline_->run_taking(std::move(inputs));
}

std::string TieredExecutable::describe() const {
  if (const Executable* fast = optimised_.load(std::memory_order_acquire)) return fast->describe();
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (!failure_.empty())
    return "the optimised tier failed (" + failure_ + "); calls run on the baseline:\n" + baseline_->describe();
  return pending_;
}

void TieredExecutable::publish(ExecutablePtr optimised) {
  FD_CHECK(optimised != nullptr && !optimised_owner_, "a tiered executable is published once");
  optimised_owner_ = std::move(optimised);
  optimised_.store(optimised_owner_.get(), std::memory_order_release);
}

void TieredExecutable::fail(const std::string& why) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  failure_ = why.empty() ? "unknown error" : why;
}

bool TieredExecutable::settled() const {
  if (optimised_ready()) return true;
  std::lock_guard<std::mutex> lock(state_mutex_);
  return !failure_.empty();
}

std::shared_ptr<TieredExecutable> compile_in_background(ExecutablePtr baseline, std::string pending,
                                                        std::function<ExecutablePtr()> build) {
  auto tiered = std::make_shared<TieredExecutable>(std::move(baseline), std::move(pending));
  std::weak_ptr<TieredExecutable> target = tiered;
  submit_background([target, build = std::move(build)] {
    if (target.expired()) return;  // its graph was dropped (recompile, reset): nothing to build
    ExecutablePtr fast;
    std::string why;
    try {
      fast = build();
    } catch (const std::exception& e) {
      why = e.what();
    }
    std::shared_ptr<TieredExecutable> t = target.lock();
    if (!t) return;
    if (fast) t->publish(std::move(fast));
    else t->fail(why);
    if (journal::recording()) journal::add("ready", {{"failed", why}}, journal::now_ms());
  });
  return tiered;
}

}  // namespace fastdyn::runtime
