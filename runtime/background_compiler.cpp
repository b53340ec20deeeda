// runtime/background_compiler.cpp — see background_compiler.h.
#include "runtime/background_compiler.h"

#include "runtime/journal.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace fastdyn::runtime {
namespace {

struct Worker {
  std::mutex mutex;
  std::condition_variable wake;  // the worker: a task was queued, or shutdown
  std::condition_variable idle;  // waiters: the queue drained
  std::deque<BackgroundTask> queue;
  bool running_task = false;
  bool shut_down = false;
  bool held = false;  // hold_background_for_testing
  bool atfork_registered = false;
  // NB: never destroyed: after fork() the child holds a std::thread for a thread it does not have,
  // and a joinable std::thread's destructor would terminate the process.
  std::thread* thread = nullptr;
  BackgroundStats stats;
};

Worker& worker() {
  static Worker* w = new Worker();  // NB: leaked on purpose: outlives static destructors
  return *w;
}

// Nothing running, and nothing queued that the worker may start (a held queue waits for the
// test that held it).
bool is_idle(const Worker& w) { return !w.running_task && (w.queue.empty() || w.held); }

void work_loop() {
  run_below_user_threads("fastdyn-compile");
  Worker& w = worker();
  std::unique_lock<std::mutex> lock(w.mutex);
  while (true) {
    w.wake.wait(lock, [&] { return w.shut_down || (!w.held && !w.queue.empty()); });
    if (w.queue.empty()) return;  // shut down
    // Newest first (see the header).
    BackgroundTask task = std::move(w.queue.back());
    w.queue.pop_back();
    w.running_task = true;
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    try {
      task();
    } catch (...) {
      // NB: tasks report their own failures; one that escapes must not end the worker.
    }
    task = nullptr;  // what it captured is released outside the lock
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    lock.lock();
    w.running_task = false;
    w.stats.finished++;
    w.stats.pending--;
    w.stats.seconds += took.count();
    if (is_idle(w)) w.idle.notify_all();
  }
}

// fork(): the queue drains before the fork and stays locked across it (see the header).
void before_fork() {
  Worker& w = worker();
  std::unique_lock<std::mutex> lock(w.mutex);
  w.idle.wait(lock, [&] { return is_idle(w); });
  lock.release();  // unlocked by after_fork_* below
}
void after_fork_parent() { worker().mutex.unlock(); }
void after_fork_child() {
  Worker& w = worker();
  w.thread = nullptr;  // the worker thread exists only in the parent
  w.mutex.unlock();
}

}  // namespace

void run_below_user_threads(const char* name) {
  // Nice 10 (Linux sets it per thread): on a small machine the first calls run on ATen, with
  // every core busy in its OpenMP regions, while this thread compiles, and they must not wait for
  // it. A thread waiting in synchronize() leaves it the core. NB: not SCHED_IDLE, which helps
  // first calls a little more (llama_kvcache's warm first call 11.3 -> 9.0 ms) but starves the
  // thread for good while the user's threads keep every core busy, and an unprivileged thread
  // cannot leave SCHED_IDLE again.
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
  ::pthread_setname_np(::pthread_self(), name);  // as top -H and /proc show it
}

bool submit_background(BackgroundTask task) {
  // The report attributes what the task records (kernels, their code) to the submitter's graph.
  if (const int32_t graph = journal::current(); graph >= 0) {
    task = [graph, inner = std::move(task)] {
      journal::Scope scope(graph);
      inner();
    };
  }
  Worker& w = worker();
  std::lock_guard<std::mutex> lock(w.mutex);
  if (w.shut_down) return false;
  if (!w.atfork_registered) {
    ::pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    w.atfork_registered = true;
  }
  if (!w.thread) w.thread = new std::thread(work_loop);
  w.queue.push_back(std::move(task));
  w.stats.pending++;
  w.wake.notify_one();
  return true;
}

void wait_background_idle() {
  Worker& w = worker();
  std::unique_lock<std::mutex> lock(w.mutex);
  w.idle.wait(lock, [&] { return is_idle(w); });
}

void shutdown_background_compiler() {
  Worker& w = worker();
  std::thread* t = nullptr;
  {
    std::lock_guard<std::mutex> lock(w.mutex);
    w.shut_down = true;
    w.stats.pending -= static_cast<int64_t>(w.queue.size());
    w.queue.clear();
    w.idle.notify_all();
    w.wake.notify_all();
    t = w.thread;
    w.thread = nullptr;
  }
  if (t && t->joinable()) t->join();
}

BackgroundStats background_stats() {
  Worker& w = worker();
  std::lock_guard<std::mutex> lock(w.mutex);
  return w.stats;
}

void hold_background_for_testing(bool hold) {
  Worker& w = worker();
  std::lock_guard<std::mutex> lock(w.mutex);
  w.held = hold;
  w.wake.notify_all();
  w.idle.notify_all();
}

void reset_background_stats() {
  Worker& w = worker();
  std::lock_guard<std::mutex> lock(w.mutex);
  w.stats.finished = 0;
  w.stats.seconds = 0.0;
}

}  // namespace fastdyn::runtime
