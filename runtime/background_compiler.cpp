// runtime/background_compiler.cpp — see background_compiler.h.
#include "runtime/background_compiler.h"

#include "runtime/env_flag.h"
#include "runtime/journal.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace fastdyn::runtime {
namespace {

struct Worker {
  std::mutex mutex;
  std::condition_variable wake;  // the threads: a task was queued, or shutdown
  std::condition_variable idle;  // waiters: the queue drained
  std::deque<BackgroundTask> queue;
  int running = 0;   // tasks running now, one per busy thread
  int waiting = 0;   // threads waiting for a task
  int wanted = 0;    // threads to start at most; 0 until the first submit decides it
  bool shut_down = false;
  bool held = false;  // hold_background_for_testing
  bool atfork_registered = false;
  // NB: never destroyed: after fork() the child holds std::threads for threads it does not have,
  // and a joinable std::thread's destructor would terminate the process.
  std::vector<std::thread*> threads;
  BackgroundStats stats;
};

Worker& worker() {
  static Worker* w = new Worker();  // NB: leaked on purpose: outlives static destructors
  return *w;
}

// Nothing running, and nothing queued that a thread may start (a held queue waits for the test
// that held it).
bool is_idle(const Worker& w) { return w.running == 0 && (w.queue.empty() || w.held); }

// FASTDYN_COMPILE_THREADS, else a quarter of the usable CPUs, 1 to 4: a 2-core machine keeps one
// thread, so the user's work keeps a core; a GPU host, whose CPUs idle while its kernels run, gets
// four (a decode loop queues one plan per new length, and a few threads drain them within a generate).
int default_background_threads() {
  if (const int64_t n = env_count("FASTDYN_COMPILE_THREADS")) return static_cast<int>(std::min<int64_t>(n, 64));
  return std::clamp(usable_cpus() / 4, 1, 4);
}

void work_loop() {
  run_below_user_threads("fastdyn-compile");
  Worker& w = worker();
  std::unique_lock<std::mutex> lock(w.mutex);
  while (true) {
    w.waiting++;
    w.wake.wait(lock, [&] { return w.shut_down || (!w.held && !w.queue.empty() && w.running < w.wanted); });
    w.waiting--;
    if (w.shut_down) return;
    // Newest first (see the header).
    BackgroundTask task = std::move(w.queue.back());
    w.queue.pop_back();
    w.running++;
    lock.unlock();
    const auto start = std::chrono::steady_clock::now();
    try {
      task();
    } catch (...) {
      // NB: tasks report their own failures; one that escapes must not end the thread.
    }
    task = nullptr;  // what it captured is released outside the lock
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    lock.lock();
    w.running--;
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
  w.threads.clear();  // the threads exist only in the parent (their objects are leaked: see Worker)
  w.waiting = 0;
  w.mutex.unlock();
}

}  // namespace

// The CPUs this process may run on (its affinity mask: a container's share, not the host's).
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

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
  if (w.wanted == 0) w.wanted = default_background_threads();
  w.queue.push_back(std::move(task));
  w.stats.pending++;
  // A thread more only when the queue holds more tasks than threads wait for one (a lone compile
  // starts one thread).
  if (w.queue.size() > static_cast<size_t>(w.waiting) && static_cast<int>(w.threads.size()) < w.wanted)
    w.threads.push_back(new std::thread(work_loop));
  w.wake.notify_one();
  return true;
}

void set_background_threads(int n) {
  Worker& w = worker();
  std::lock_guard<std::mutex> lock(w.mutex);
  w.wanted = std::max(1, n);
  w.wake.notify_all();
}

int background_threads() {
  Worker& w = worker();
  std::lock_guard<std::mutex> lock(w.mutex);
  return w.wanted == 0 ? default_background_threads() : w.wanted;
}

void wait_background_idle() {
  Worker& w = worker();
  std::unique_lock<std::mutex> lock(w.mutex);
  w.idle.wait(lock, [&] { return is_idle(w); });
}

void shutdown_background_compiler() {
  Worker& w = worker();
  std::vector<std::thread*> threads;
  {
    std::lock_guard<std::mutex> lock(w.mutex);
    w.shut_down = true;
    w.stats.pending -= static_cast<int64_t>(w.queue.size());
    w.queue.clear();
    w.idle.notify_all();
    w.wake.notify_all();
    threads.swap(w.threads);
  }
  for (std::thread* t : threads)
    if (t->joinable()) t->join();
}

BackgroundStats background_stats() {
  Worker& w = worker();
  std::lock_guard<std::mutex> lock(w.mutex);
  BackgroundStats s = w.stats;
  s.threads = static_cast<int64_t>(w.threads.size());
  return s;
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
