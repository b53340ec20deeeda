// eval_hook/config.h — process-wide settings and counters of the hook, and the thread-local
// mode (off / run-only / compile).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace fastdyn::eval_hook {

enum class Mode : uint8_t { Off, RunOnly, Compile };

struct Config {
  int recompile_limit = 8;       // cache entries per code object before running eagerly
  bool log_graph_breaks = false; // FASTDYN_LOG=graph_breaks,recompiles,guards,graphs,code
  bool log_recompiles = false;
  bool log_guards = false;
  bool log_graphs = false;
  bool log_code = false;
  // "native" (llvm_cpu where built, else aten), "llvm_cpu" or "aten"; set by enable()/jit()
  // (process-wide: the last call wins).
  std::string backend = "native";
  // Tiered compilation (runtime/tiered_executable.h): llvm_cpu kernels compile on a background
  // thread while the graph's calls run on aten; off (FASTDYN_BACKGROUND_COMPILE=0, or
  // fastdyn.set_background_compile(False)): the call that traces waits for its kernels.
  bool background_compile = true;
};
Config& config();
void load_config_from_env();  // reads FASTDYN_LOG, FASTDYN_BACKGROUND_COMPILE; called at module import

struct Stats {
  uint64_t frames_seen = 0;
  uint64_t frames_compiled = 0;
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t recompiles = 0;
  uint64_t graph_breaks = 0;
  uint64_t graphs = 0;
  double compile_seconds = 0.0;
};
Stats& stats();  // guarded by the GIL

// What the current thread's frames get. enable() sets the process default; a jit wrapper
// overrides it for its call on its thread; the compiler turns it off while it runs.
struct ThreadMode {
  Mode mode = Mode::Off;
  bool fullgraph = false;
  bool overridden = false;
};
ThreadMode& thread_mode();            // this thread's override
void set_process_mode(Mode m, bool fullgraph);
Mode effective_mode(bool* fullgraph);

// Scoped override of this thread's mode.
class ModeGuard {
 public:
  ModeGuard(Mode m, bool fullgraph);
  ~ModeGuard();
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  ThreadMode saved_;
};

void log_event(const char* kind, const std::string& message);  // "[fastdyn] kind: message"

}  // namespace fastdyn::eval_hook
