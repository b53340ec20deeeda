// runtime/journal.cpp — see journal.h.
#include "runtime/journal.h"

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "runtime/background_compiler.h"

namespace fastdyn::runtime::journal {
namespace detail {
std::atomic<bool> g_on{false};
}
namespace {

struct Deferred {
  size_t index;         // its place in events
  uint64_t generation;  // clear() drops what an older generation queued
  MakeFields make;
};

struct State {
  std::mutex mu;
  std::vector<Event> events;
  size_t bytes = 0;
  size_t dropped = 0;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  // Deferred events: made in order by one thread, started on first use.
  std::deque<Deferred> queue;
  bool making = false;  // the thread is running a make() (outside the lock)
  bool shut_down = false;
  bool atfork_registered = false;
  uint64_t generation = 0;
  std::condition_variable wake, made;
  std::thread* thread = nullptr;  // NB: never destroyed (see background_compiler.cpp's worker)
};

State& state() {
  static State* s = new State();  // never destroyed: background threads may record during exit
  return *s;
}

std::atomic<int32_t> g_next_graph{0};
thread_local int32_t t_current = -1;

size_t bytes_of(const Event& e) {
  size_t bytes = e.kind.size();
  for (const auto& [k, v] : e.fields) bytes += k.size() + v.size();
  return bytes;
}

bool drained(const State& s) { return s.queue.empty() && !s.making; }

// Puts a made event's fields in its place (s.mu held); past the bound their texts are left empty.
void fill(State& s, const Deferred& d, std::vector<std::pair<std::string, std::string>> fields) {
  if (d.generation != s.generation || d.index >= s.events.size()) return;  // cleared meanwhile
  Event& e = s.events[d.index];
  e.fields = std::move(fields);
  const size_t bytes = bytes_of(e);
  if (s.bytes + bytes > kMaxBytes) {
    ++s.dropped;
    for (auto& field : e.fields) field.second.clear();
    return;
  }
  s.bytes += bytes;
}

std::vector<std::pair<std::string, std::string>> make_fields(const MakeFields& make) {
  try {
    return make();
  } catch (const std::exception& err) {
    return {{"error", err.what()}};
  } catch (...) {
    return {{"error", "unknown"}};
  }
}

void make_loop() {
  run_below_user_threads("fastdyn-journal");
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mu);
  while (true) {
    s.wake.wait(lock, [&] { return s.shut_down || !s.queue.empty(); });
    if (s.queue.empty()) return;  // shut down
    Deferred d = std::move(s.queue.front());
    s.queue.pop_front();
    s.making = true;
    lock.unlock();
    std::vector<std::pair<std::string, std::string>> fields = make_fields(d.make);
    d.make = nullptr;  // what it captured is released outside the lock
    lock.lock();
    s.making = false;
    fill(s, d, std::move(fields));
    if (drained(s)) s.made.notify_all();
  }
}

// Starts the thread if there is work and none (the first deferred event, or a child after fork).
void ensure_thread(State& s) {
  if (!s.atfork_registered) {
    // fork(): the queue drains first and the lock is held across it; the child starts a fresh thread.
    ::pthread_atfork(
        [] {
          State& st = state();
          std::unique_lock<std::mutex> lock(st.mu);
          if (st.thread) st.made.wait(lock, [&] { return drained(st); });
          lock.release();
        },
        [] { state().mu.unlock(); },
        [] {
          state().thread = nullptr;
          state().mu.unlock();
        });
    s.atfork_registered = true;
  }
  if (!s.thread && !s.queue.empty()) s.thread = new std::thread(make_loop);
}

}  // namespace

void set_on(bool on) {
  if (on && !detail::g_on.load()) {
    std::lock_guard<std::mutex> lock(state().mu);
    state().t0 = std::chrono::steady_clock::now();
  }
  detail::g_on.store(on);
}

void add(Event e) {
  if (!on()) return;
  if (e.graph < 0) e.graph = t_current;
  const size_t bytes = bytes_of(e);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.bytes + bytes > kMaxBytes) {
    ++s.dropped;
    return;
  }
  s.bytes += bytes;
  s.events.push_back(std::move(e));
}

void add(std::string kind, std::vector<std::pair<std::string, std::string>> fields, double ms) {
  if (!on()) return;
  Event e;
  e.kind = std::move(kind);
  e.fields = std::move(fields);
  e.ms = ms;
  add(std::move(e));
}

void add_deferred(std::string kind, MakeFields make) {
  if (!on()) return;
  State& s = state();
  Event e;
  e.graph = t_current;
  e.kind = std::move(kind);
  std::unique_lock<std::mutex> lock(s.mu);
  if (s.shut_down) {  // no thread any more: made here
    lock.unlock();
    e.fields = make_fields(make);
    add(std::move(e));
    return;
  }
  s.queue.push_back({s.events.size(), s.generation, std::move(make)});
  s.events.push_back(std::move(e));
  ensure_thread(s);
  s.wake.notify_one();
}

std::vector<Event> snapshot(size_t* dropped) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mu);
  ensure_thread(s);
  s.made.wait(lock, [&] { return drained(s); });
  if (dropped) *dropped = s.dropped;
  return s.events;
}

void clear() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.events.clear();
  s.queue.clear();
  ++s.generation;
  s.bytes = s.dropped = 0;
  s.t0 = std::chrono::steady_clock::now();
}

void shutdown() {
  State& s = state();
  std::thread* t = nullptr;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    ensure_thread(s);
    s.made.wait(lock, [&] { return drained(s); });
    s.shut_down = true;
    s.wake.notify_all();
    t = s.thread;
    s.thread = nullptr;
  }
  if (t && t->joinable()) t->join();
}

double now_ms() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s.t0).count();
}

int32_t new_graph() { return g_next_graph.fetch_add(1); }
int32_t current() { return t_current; }

Scope::Scope(int32_t graph) : previous_(t_current) { t_current = graph; }
Scope::~Scope() { t_current = previous_; }

}  // namespace fastdyn::runtime::journal
