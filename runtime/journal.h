// runtime/journal.h — what fastdyn did, recorded for its HTML report (fastdyn.report,
// FASTDYN_REPORT, `fastdyn run --report`; python/fastdyn/report.py assembles and renders it).
//
// Off unless a report is asked for: every layer's recording site starts with `if (journal::on())`,
// one relaxed atomic load, and builds no text while it is off. When on, each layer adds flat
// events; every event names the graph it belongs to, an id from new_graph(), so that what the
// layers below the hook record (passes, kernels, their generated code, possibly on the background
// compile thread) lands beside the entry the hook records. A thread's current graph is set by a
// Scope; submit_background() carries the submitter's into its task.
//
// The events, by kind (fields are text; the report's collector reads them by name):
//   entry      eval_hook: a compiled cache entry (code identity, entry number, graph text, node
//              locations, input sources, guards, program text, the break that ended it); ms = compile
//   break      eval_hook: a graph break or a frame that could not be captured (reason, file, line)
//   recompile  eval_hook: a miss that compiles another entry: the guard of the newest entry that failed
//   limit      eval_hook: the recompile-limit warning
//   pass       codegen: one compile step (name), ms
//   kernel     codegen/loop: a fused kernel of a program (loop IR, graph values fused into it, locations)
//   kernel_code  a backend: a kernel's generated code (LLVM IR, CUDA C++; deferred, add_deferred)
//   ready      runtime: a tiered graph's kernels were published; ms since the journal started
//   check      runtime: accuracy mode (FASTDYN_CHECK): the first kernel of a graph that diverged
//
// Bounded: past kMaxBytes of field text, events are counted as dropped instead of kept.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace fastdyn::runtime::journal {

struct Event {
  int32_t graph = -1;  // new_graph()'s id, -1: none
  std::string kind;
  std::vector<std::pair<std::string, std::string>> fields;
  double ms = 0.0;
};

namespace detail {
extern std::atomic<bool> g_on;
}
inline bool on() { return detail::g_on.load(std::memory_order_relaxed); }
void set_on(bool on);
int32_t current();  // this thread's graph, -1 outside a Scope
// Whether what the layers below the hook are doing now belongs to a graph of the report: the
// journal is on and a Scope names the graph (a compile, or its task on the background thread).
inline bool recording() { return on() && current() >= 0; }

constexpr size_t kMaxBytes = size_t{256} << 20;

// Thread-safe; does nothing while off. The graph defaults to the thread's current one.
void add(Event e);
void add(std::string kind, std::vector<std::pair<std::string, std::string>> fields, double ms = 0.0);

// An event whose fields are slow to make (a kernel's code printed from its bitcode): its place in
// the journal is taken now, in order, and `make` runs on the journal's own thread (below the
// user's threads, like the compile worker), so that recording costs the compiling thread next to
// nothing. `make` must not touch Python. After shutdown() it runs on the caller's thread.
using MakeFields = std::function<std::vector<std::pair<std::string, std::string>>()>;
void add_deferred(std::string kind, MakeFields make);

// Every event kept since the last clear(), in order, and how many were dropped past the bound.
// Waits for the deferred events added before it.
std::vector<Event> snapshot(size_t* dropped = nullptr);
void clear();  // deferred events not made yet are dropped

// Makes the deferred events still queued and ends the journal's thread (Python's atexit, before
// static destructors: a print in flight must not meet LLVM's). fork() waits for the queue too.
void shutdown();

// Milliseconds since the journal was last switched on or cleared (a `ready` event's time).
double now_ms();

int32_t new_graph();  // a fresh id (never -1)

class Scope {
 public:
  explicit Scope(int32_t graph);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  int32_t previous_;
};

}  // namespace fastdyn::runtime::journal
