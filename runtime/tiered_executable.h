// runtime/tiered_executable.h — an executable that starts on a quick-to-build tier and switches
// to an optimised one when a background compile publishes it.
//
// Why: LLVM needs 10-100 ms for a graph's kernels, while the ATen executable of the same graph is
// built in microseconds per op. The call that traces a graph, and the calls that follow until the
// kernels are ready, run the graph op by op on ATen (exactly eager's results, mutations and
// errors); from the first call after the optimised executable is published, it runs instead. The
// switch is one atomic pointer: a call runs entirely on one tier.
//
// compile_in_background() queues `build` on the background worker (background_compiler.h). build
// runs on that thread without the GIL: it must not touch Python. If it throws, the baseline keeps
// running and describe() says why. If the executable is dropped before the worker reaches the
// task, the task does nothing.
#pragma once
#include <atomic>
#include <functional>
#include <mutex>
#include <string>

#include "runtime/executable.h"

namespace fastdyn::runtime {

class TieredExecutable final : public Executable {
 public:
  // `pending` describes the optimised tier before it exists (its program, for explain).
  TieredExecutable(ExecutablePtr baseline, std::string pending);

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) override;
  std::vector<at::Tensor> run_taking(std::vector<at::Tensor>&& inputs) override;
  std::string describe() const override;

  // Called once, from any thread: the following calls run `optimised`.
  void publish(ExecutablePtr optimised);
  // The optimised tier will not come; the baseline runs from now on. `why` shows in describe().
  void fail(const std::string& why);
  bool optimised_ready() const { return optimised_.load(std::memory_order_acquire) != nullptr; }
  // Published or failed: the background worker is done with it.
  bool settled() const override;

 private:
  ExecutablePtr baseline_;
  ExecutablePtr optimised_owner_;  // written once, before optimised_ is stored (release)
  std::atomic<Executable*> optimised_{nullptr};
  mutable std::mutex state_mutex_;  // pending_ and failure_ (describe may race with fail)
  std::string pending_;
  std::string failure_;
};

// A TieredExecutable running `baseline` now and build()'s result once the worker has built it.
// When the worker refuses work (after shutdown at exit) the baseline simply stays.
std::shared_ptr<TieredExecutable> compile_in_background(ExecutablePtr baseline, std::string pending,
                                                        std::function<ExecutablePtr()> build);

}  // namespace fastdyn::runtime
