// runtime/journal.h: deferred events (made on the journal's thread) keep their place, snapshot()
// waits for them, clear() drops the ones not made yet, and fork() and shutdown() leave nothing
// half made.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "runtime/journal.h"

namespace fastdyn::runtime::journal {
namespace {

using Fields = std::vector<std::pair<std::string, std::string>>;

std::string field(const Event& e, const std::string& name) {
  for (const auto& [k, v] : e.fields)
    if (k == name) return v;
  return "<none>";
}

// A make() that takes a while, on a thread other than the caller's.
MakeFields slow(std::string value, std::atomic<std::thread::id>* made_on = nullptr) {
  return [value, made_on]() -> Fields {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (made_on) made_on->store(std::this_thread::get_id());
    return {{"code", value}};
  };
}

class Journal : public ::testing::Test {
 protected:
  void SetUp() override {
    clear();
    set_on(true);
  }
  void TearDown() override {
    set_on(false);
    clear();
  }
};

TEST_F(Journal, DeferredEventsKeepTheirPlaceAndAreMadeOffTheCallersThread) {
  std::atomic<std::thread::id> made_on{};
  const auto t0 = std::chrono::steady_clock::now();
  add("pass", {{"name", "a"}});
  {
    Scope scope(41);
    add_deferred("kernel_code", slow("first", &made_on));
  }
  add("pass", {{"name", "b"}});
  add_deferred("kernel_code", slow("second"));
  add("pass", {{"name", "c"}});
  // the caller did not wait for the 40 ms of making
  const double waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited_ms, 15.0);
  const std::vector<Event> events = snapshot();
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(field(events[0], "name"), "a");
  EXPECT_EQ(field(events[1], "code"), "first");
  EXPECT_EQ(events[1].graph, 41);  // the graph of the Scope it was added in
  EXPECT_EQ(field(events[2], "name"), "b");
  EXPECT_EQ(field(events[3], "code"), "second");
  EXPECT_EQ(events[3].kind, "kernel_code");
  EXPECT_EQ(field(events[4], "name"), "c");
  EXPECT_NE(made_on.load(), std::this_thread::get_id());
}

TEST_F(Journal, NothingIsMadeWhileOffAndClearDropsWhatIsQueued) {
  set_on(false);
  std::atomic<int> calls{0};
  add_deferred("kernel_code", [&]() -> Fields {
    ++calls;
    return {};
  });
  set_on(true);
  EXPECT_TRUE(snapshot().empty());
  EXPECT_EQ(calls.load(), 0);
  for (int i = 0; i < 5; ++i) add_deferred("kernel_code", slow(std::to_string(i)));
  clear();
  add("pass", {{"name", "after"}});
  const std::vector<Event> events = snapshot();
  ASSERT_EQ(events.size(), 1u);  // the one in flight at clear() lands nowhere
  EXPECT_EQ(field(events[0], "name"), "after");
}

TEST_F(Journal, AThrowingMakeLeavesAnErrorInItsPlace) {
  add_deferred("kernel_code", []() -> Fields { throw std::runtime_error("bitcode unreadable"); });
  const std::vector<Event> events = snapshot();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(field(events[0], "error"), "bitcode unreadable");
}

TEST_F(Journal, AForkedChildInheritsNoHalfMadeEventAndMakesItsOwn) {
  add_deferred("kernel_code", slow("parent"));
  const pid_t pid = ::fork();  // waits for "parent" to be made (pthread_atfork)
  if (pid == 0) {
    std::vector<Event> before = snapshot();
    add_deferred("kernel_code", slow("child"));  // a fresh thread in the child
    std::vector<Event> after = snapshot();
    const bool ok = before.size() == 1 && field(before[0], "code") == "parent" && after.size() == 2 &&
                    field(after[1], "code") == "child";
    ::_exit(ok ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(snapshot().size(), 1u);
}

// Last: shutdown() is for good in this process.
TEST_F(Journal, ZZShutdownMakesWhatIsQueuedThenMakesOnTheCallersThread) {
  add_deferred("kernel_code", slow("queued"));
  shutdown();
  std::atomic<std::thread::id> made_on{};
  add_deferred("kernel_code", slow("inline", &made_on));
  EXPECT_EQ(made_on.load(), std::this_thread::get_id());
  const std::vector<Event> events = snapshot();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(field(events[0], "code"), "queued");
  EXPECT_EQ(field(events[1], "code"), "inline");
}

}  // namespace
}  // namespace fastdyn::runtime::journal
