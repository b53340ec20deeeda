// eval_hook/config.h — process-wide settings and counters of the hook, and the thread-local
// mode (off / run-only / compile).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "codegen/backends/backend_id.h"
#include "symbolic/dynamic_mode.h"

namespace fastdyn::eval_hook {

enum class Mode : uint8_t { Off, RunOnly, Compile };

struct Config {
  // Cache entries per code object; past it a miss runs eagerly, the entries stay in use
  // (fastdyn.set_recompile_limit, FASTDYN_RECOMPILE_LIMIT).
  int recompile_limit = 8;
  bool log_graph_breaks = false; // FASTDYN_LOG=graph_breaks,recompiles,guards,graphs,code
  bool log_recompiles = false;
  bool log_guards = false;
  bool log_graphs = false;
  bool log_code = false;
  // Tiered compilation (runtime/tiered_executable.h): llvm_cpu kernels compile on a background
  // thread while the graph's calls run on aten; off (FASTDYN_BACKGROUND_COMPILE=0, or
  // fastdyn.set_background_compile(False)): the call that traces waits for its kernels.
  bool background_compile = true;
  // FASTDYN_STRICT=1 or fastdyn._C.set_strict(True) (the test suite's setting): a compiler or
  // backend failure that would run a graph on aten instead raises in the frame that compiled it,
  // naming the node. Limits that are not failures (no CPU lowering for grad, another device)
  // still run on aten.
  bool strict = false;
  bool test_fail_backend = false;  // a test hook: the llvm_cpu backend fails on every graph
  // A test knob (fastdyn._C.set_compile_tensor_free): frames without a tensor op get cache
  // entries too (transformed code, guards, continuations), which a user's program never needs,
  // so that CPython's own tests exercise the bytecode rewriting and not only the fallback.
  bool compile_tensor_free = false;
};
// Graphs that ran on aten because compiling them failed (a compiler bug or a backend refusal),
// on any thread since the last reset; the test suite fails a test that leaves it non-zero.
std::atomic<uint64_t>& backend_failures();
Config& config();
// Reads FASTDYN_LOG, FASTDYN_BACKGROUND_COMPILE, FASTDYN_STRICT; called at module import, where
// it also warns once about each mistake check_environment() finds.
void load_config_from_env();
// What is wrong with the process's FASTDYN_* settings: unknown names, values a setting does not
// accept (each message names the valid ones).
std::vector<std::string> check_environment();
// A flag setting's value: off for "0", "off", "false", "no" and "", on otherwise.
bool flag_value(const char* text);
// A count setting's value: the integer, or -1 when `text` is not a non-negative integer.
int count_value(const std::string& text);

struct Stats {
  uint64_t frames_seen = 0;
  uint64_t frames_compiled = 0;
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t recompiles = 0;
  uint64_t graph_breaks = 0;
  uint64_t graphs = 0;
  double compile_seconds = 0.0;
  // Sizes a dynamic graph was specialised to (runtime/dynamic_executable.h); counted where the
  // graph runs, which may be without the GIL.
  std::atomic<uint64_t> sizes_compiled{0};
  Stats() = default;
  Stats& operator=(const Stats& o) {
    frames_seen = o.frames_seen; frames_compiled = o.frames_compiled; cache_hits = o.cache_hits;
    cache_misses = o.cache_misses; recompiles = o.recompiles; graph_breaks = o.graph_breaks;
    graphs = o.graphs; compile_seconds = o.compile_seconds;
    sizes_compiled.store(o.sizes_compiled.load());
    return *this;
  }
};
Stats& stats();  // guarded by the GIL (but sizes_compiled)

// What the current thread's frames get. enable() sets the process default; a jit wrapper
// overrides it for its call on its thread; the compiler turns it off while it runs.
// A request: whether to compile, fullgraph, and the backend its graphs compile with.
// What a request's graphs compile to: the backend, and whether graphs on CUDA tensors replay as
// CUDA graphs after warm-up (mode="reduce-overhead": runtime/cuda_graph_executable.h). A cache
// entry remembers its target and serves requests for the same one only.
struct Target {
  codegen::Backend backend = codegen::Backend::Native;
  bool cuda_graphs = false;
  bool operator==(const Target& o) const { return backend == o.backend && cuda_graphs == o.cuda_graphs; }
};
struct Request {
  Mode mode = Mode::Off;
  bool fullgraph = false;
  Target target;
  symbolic::DynamicMode dynamic = symbolic::DynamicMode::Auto;  // which sizes become symbols
};
struct ThreadMode {
  Request request;
  bool overridden = false;
};
void set_process_mode(const Request& r);

namespace detail {
extern Request g_process;
// ModeGuards alive on all threads. While none is, no thread is overridden and the hook skips
// the thread-local read (a __tls_get_addr call in a shared library) on every frame. A thread
// always sees its own guards' increments, so another thread's count can only send it down the
// thread-local path, never past an override of its own.
extern std::atomic<int> g_mode_overrides;
const Request& thread_request();
}  // namespace detail

inline const Request& current_request() {
  if (detail::g_mode_overrides.load(std::memory_order_relaxed) == 0) return detail::g_process;
  return detail::thread_request();
}

// Scoped override of this thread's request.
class ModeGuard {
 public:
  explicit ModeGuard(const Request& r);
  ~ModeGuard();
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  ThreadMode saved_;
};

void log_event(const char* kind, const std::string& message);  // "[fastdyn] kind: message"

}  // namespace fastdyn::eval_hook
