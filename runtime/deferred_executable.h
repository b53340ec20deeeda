// runtime/deferred_executable.h — an executable that runs a baseline until building the real one
// is cheap, then builds it on the calling thread and runs it from then on.
//
// Why: a dynamic entry meets a new size at every step of a decode loop. Building the executable
// for a size is cheap (about 1.5 ms: the graph passes and one key lookup per kernel) when the
// kernels are already compiled, because they take their sizes as arguments. While the entry's
// first kernels are still compiling in the background, it is not: each new size would run the
// passes, miss the kernels and queue another background compile of the same kernels, and the
// Python thread would pay the passes at every step on top of running on ATen. A deferred
// executable runs the baseline (ATen) for such a size, and calls `build` at the first call after
// `ready()` says the compile in flight has settled. (compile_dynamic's build only queues the
// passes on the background thread and runs ATen once more: 1.5 ms at each of a decode loop's 60
// lengths is more than its steps on ATen.)
#pragma once
#include <atomic>
#include <functional>
#include <mutex>
#include <string>

#include "runtime/executable.h"

namespace fastdyn::runtime {

class DeferredExecutable final : public Executable {
 public:
  // `pending`: describe()'s first line while the baseline runs, followed by the baseline's own
  // description (built when asked: a decode loop makes one of these per new size).
  DeferredExecutable(ExecutablePtr baseline, std::function<bool()> ready, std::function<ExecutablePtr()> build,
                     std::string pending);

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) override { return current().run(inputs); }
  std::vector<at::Tensor> run_taking(std::vector<at::Tensor>&& inputs) override {
    return current().run_taking(std::move(inputs));
  }
  std::string describe() const override;
  bool built() const { return built_.load(std::memory_order_acquire) != nullptr; }
  bool settled() const override {
    const Executable* real = built_.load(std::memory_order_acquire);
    return real && real->settled();
  }

 private:
  Executable& current();  // the real executable once built (building it when ready), else the baseline
  ExecutablePtr baseline_;
  std::function<bool()> ready_;
  std::function<ExecutablePtr()> build_;
  std::string pending_;
  std::mutex build_mutex_;       // one thread builds
  ExecutablePtr built_owner_;    // written once, before built_ is stored (release)
  std::atomic<Executable*> built_{nullptr};
};

}  // namespace fastdyn::runtime
