// runtime/journal.cpp — see journal.h.
#include "runtime/journal.h"

#include <chrono>
#include <mutex>

namespace fastdyn::runtime::journal {
namespace detail {
std::atomic<bool> g_on{false};
}
namespace {

struct State {
  std::mutex mu;
  std::vector<Event> events;
  size_t bytes = 0;
  size_t dropped = 0;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
};

State& state() {
  static State* s = new State();  // never destroyed: background threads may record during exit
  return *s;
}

std::atomic<int32_t> g_next_graph{0};
thread_local int32_t t_current = -1;

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
  size_t bytes = e.kind.size();
  for (const auto& [k, v] : e.fields) bytes += k.size() + v.size();
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

std::vector<Event> snapshot(size_t* dropped) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (dropped) *dropped = s.dropped;
  return s.events;
}

void clear() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.events.clear();
  s.bytes = s.dropped = 0;
  s.t0 = std::chrono::steady_clock::now();
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
