// Tiered and deferred executables and the background compile worker (runtime/tiered_executable.h,
// runtime/deferred_executable.h, runtime/background_compiler.h), with fake executables: no Python, no LLVM.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "runtime/background_compiler.h"
#include "runtime/deferred_executable.h"
#include "runtime/errors.h"
#include "runtime/tiered_executable.h"

namespace fastdyn::runtime {
namespace {

// Returns its inputs plus `add`, and says who it is.
class AddExecutable final : public Executable {
 public:
  AddExecutable(double add, std::string name) : add_(add), name_(std::move(name)) {}
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) override {
    calls++;
    return {inputs.at(0) + add_};
  }
  std::string describe() const override { return name_ + "\n"; }
  std::atomic<int> calls{0};

 private:
  double add_;
  std::string name_;
};

double run_once(Executable& e) { return e.run({at::zeros({1})})[0].item<double>(); }

TEST(TieredExecutable, RunsTheBaselineUntilTheOptimisedTierIsPublished) {
  auto baseline = std::make_shared<AddExecutable>(1, "baseline");
  TieredExecutable t(baseline, "pending\n");
  EXPECT_FALSE(t.optimised_ready());
  EXPECT_EQ(run_once(t), 1);
  EXPECT_EQ(t.describe(), "pending\n");
  t.publish(std::make_shared<AddExecutable>(2, "optimised"));
  EXPECT_TRUE(t.optimised_ready());
  EXPECT_EQ(run_once(t), 2);
  EXPECT_EQ(t.describe(), "optimised\n");
  EXPECT_EQ(baseline->calls, 1);
  EXPECT_THROW(t.publish(std::make_shared<AddExecutable>(3, "again")), InternalError);
}

TEST(TieredExecutable, IsSettledOncePublishedOrFailed) {
  TieredExecutable published(std::make_shared<AddExecutable>(1, "baseline"), "pending\n");
  EXPECT_FALSE(published.settled());
  published.publish(std::make_shared<AddExecutable>(2, "optimised"));
  EXPECT_TRUE(published.settled());
  TieredExecutable failed(std::make_shared<AddExecutable>(1, "baseline"), "pending\n");
  failed.fail("no");
  EXPECT_TRUE(failed.settled());
}

TEST(DeferredExecutable, RunsTheBaselineUntilReadyThenBuildsOnceOnTheCallingThread) {
  auto baseline = std::make_shared<AddExecutable>(1, "baseline");
  std::atomic<bool> ready{false};
  std::atomic<int> builds{0};
  DeferredExecutable d(
      baseline, [&] { return ready.load(); },
      [&]() -> ExecutablePtr {
        builds++;
        return std::make_shared<AddExecutable>(2, "built");
      },
      "deferred:");
  EXPECT_EQ(run_once(d), 1);
  EXPECT_EQ(run_once(d), 1);
  EXPECT_EQ(builds, 0);
  EXPECT_FALSE(d.built());
  EXPECT_EQ(d.describe(), "deferred:\nbaseline\n");  // its line, then what runs meanwhile
  ready = true;
  std::vector<std::thread> callers;
  std::atomic<int> sum{0};
  for (int i = 0; i < 4; ++i) callers.emplace_back([&] { sum += static_cast<int>(run_once(d)); });
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(sum, 8);     // every call after ready ran the built executable
  EXPECT_EQ(builds, 1);  // built once, whichever thread came first
  EXPECT_TRUE(d.built());
  EXPECT_EQ(d.describe(), "built\n");
  EXPECT_EQ(baseline->calls, 2);
}

TEST(TieredExecutable, AFailedBuildKeepsTheBaselineAndSaysWhy) {
  hold_background_for_testing(true);
  auto t = compile_in_background(std::make_shared<AddExecutable>(1, "baseline"), "pending\n",
                                 []() -> ExecutablePtr { throw BackendError("LLVM said no"); });
  EXPECT_EQ(t->describe(), "pending\n");  // held: the worker has not started it
  hold_background_for_testing(false);
  wait_background_idle();
  EXPECT_FALSE(t->optimised_ready());
  EXPECT_EQ(run_once(*t), 1);
  EXPECT_NE(t->describe().find("LLVM said no"), std::string::npos) << t->describe();
  EXPECT_NE(t->describe().find("baseline"), std::string::npos) << t->describe();
}

TEST(TieredExecutable, TheBackgroundBuildTakesOverAndIsCounted) {
  const int64_t before = background_stats().finished;
  std::atomic<bool> built_off_thread{false};
  const std::thread::id caller = std::this_thread::get_id();
  auto t = compile_in_background(std::make_shared<AddExecutable>(1, "baseline"), "pending\n", [&]() -> ExecutablePtr {
    built_off_thread = std::this_thread::get_id() != caller;
    return std::make_shared<AddExecutable>(2, "optimised");
  });
  wait_background_idle();
  EXPECT_TRUE(built_off_thread);
  EXPECT_TRUE(t->optimised_ready());
  EXPECT_EQ(run_once(*t), 2);
  EXPECT_EQ(background_stats().finished, before + 1);
  EXPECT_EQ(background_stats().pending, 0);
}

TEST(TieredExecutable, ADroppedExecutableIsNeverBuilt) {
  std::atomic<bool> built{false};
  hold_background_for_testing(true);
  {
    auto t = compile_in_background(std::make_shared<AddExecutable>(1, "baseline"), "pending\n", [&]() -> ExecutablePtr {
      built = true;
      return std::make_shared<AddExecutable>(2, "optimised");
    });
  }  // dropped (a recompile, reset) while queued
  hold_background_for_testing(false);
  wait_background_idle();
  EXPECT_FALSE(built);
}

TEST(TieredExecutable, CallsFromManyThreadsDuringTheSwitchRunOneTierEach) {
  auto baseline = std::make_shared<AddExecutable>(1, "baseline");
  auto optimised = std::make_shared<AddExecutable>(2, "optimised");
  TieredExecutable t(baseline, "pending\n");
  std::atomic<bool> bad{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      for (int k = 0; k < 200; ++k) {
        const double v = run_once(t);
        if (v != 1 && v != 2) bad = true;
      }
    });
  t.publish(optimised);
  for (std::thread& th : threads) th.join();
  EXPECT_FALSE(bad);
  EXPECT_EQ(baseline->calls + optimised->calls, 800);
  EXPECT_EQ(run_once(t), 2);
}

// Newest first: the queued tasks run in the reverse of their submission order, so the graph a
// program runs now compiles before older queued ones (background_compiler.h says why).
TEST(BackgroundCompiler, QueuedTasksRunNewestFirst) {
  const int threads = background_threads();
  set_background_threads(1);
  hold_background_for_testing(true);
  std::vector<int> order;  // written by the worker only, one task at a time
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(submit_background([&order, i] { order.push_back(i); }));
  hold_background_for_testing(false);
  wait_background_idle();
  EXPECT_EQ(order, (std::vector<int>{3, 2, 1, 0}));
  set_background_threads(threads);
}

// Tasks run on up to background_threads() threads at once: two tasks that each wait for the other
// to start finish only if they run at the same time (one thread would time out the first).
TEST(BackgroundCompiler, TasksRunOnSeveralThreadsAtOnce) {
  const int threads = background_threads();
  set_background_threads(2);
  std::atomic<int> started{0};
  std::atomic<int> met{0};
  auto task = [&] {
    started++;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    if (started.load() >= 2) met++;
  };
  ASSERT_TRUE(submit_background(task));
  ASSERT_TRUE(submit_background(task));
  wait_background_idle();
  EXPECT_EQ(met, 2);
  EXPECT_GE(background_stats().threads, 2);
  EXPECT_EQ(background_stats().pending, 0);
  // A bound of one: never two tasks at once, whatever the threads already started.
  set_background_threads(1);
  std::atomic<int> running{0};
  std::atomic<int> most{0};
  for (int i = 0; i < 6; ++i)
    ASSERT_TRUE(submit_background([&] {
      const int now = ++running;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      running--;
    }));
  wait_background_idle();
  EXPECT_EQ(most, 1);
  set_background_threads(threads);
}

// Runs alone in its own process (gtest_discover_tests: one process per test).
TEST(BackgroundCompiler, AfterShutdownWorkIsRefusedAndTheBaselineStays) {
  submit_background([] {});
  shutdown_background_compiler();
  EXPECT_FALSE(submit_background([] {}));
  auto t = compile_in_background(std::make_shared<AddExecutable>(1, "baseline"), "pending\n",
                                 [] { return std::make_shared<AddExecutable>(2, "optimised"); });
  wait_background_idle();  // returns: nothing can run
  EXPECT_FALSE(t->optimised_ready());
  EXPECT_EQ(run_once(*t), 1);
  shutdown_background_compiler();  // idempotent
}

}  // namespace
}  // namespace fastdyn::runtime
