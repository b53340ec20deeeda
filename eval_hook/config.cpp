// eval_hook/config.cpp — see config.h.
#include "eval_hook/config.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fastdyn::eval_hook {
namespace detail {
Mode g_process_mode = Mode::Off;
bool g_process_fullgraph = false;
std::atomic<int> g_mode_overrides{0};
}  // namespace detail

namespace {
thread_local ThreadMode t_mode;
}  // namespace

Config& config() {
  static Config c;
  return c;
}

Stats& stats() {
  static Stats s;
  return s;
}

void load_config_from_env() {
  Config& c = config();
  if (const char* bg = std::getenv("FASTDYN_BACKGROUND_COMPILE"))
    c.background_compile = !(std::strcmp(bg, "0") == 0 || std::strcmp(bg, "off") == 0 || std::strcmp(bg, "false") == 0);
  const char* env = std::getenv("FASTDYN_LOG");
  if (!env) return;
  // NB: no iostreams (see runtime/format.h).
  std::string rest = env;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const bool all = item == "all";
    if (all || item == "graph_breaks") c.log_graph_breaks = true;
    if (all || item == "recompiles") c.log_recompiles = true;
    if (all || item == "guards") c.log_guards = true;
    if (all || item == "graphs") c.log_graphs = true;
    if (all || item == "code") c.log_code = true;
  }
}

void set_process_mode(Mode m, bool fullgraph) {
  detail::g_process_mode = m;
  detail::g_process_fullgraph = fullgraph;
}

Mode detail::thread_effective_mode(bool* fullgraph) {
  const ThreadMode& t = t_mode;
  if (t.overridden) {
    if (fullgraph) *fullgraph = t.fullgraph;
    return t.mode;
  }
  if (fullgraph) *fullgraph = g_process_fullgraph;
  return g_process_mode;
}

ModeGuard::ModeGuard(Mode m, bool fullgraph) : saved_(t_mode) {
  t_mode.mode = m;
  t_mode.fullgraph = fullgraph;
  t_mode.overridden = true;
  detail::g_mode_overrides.fetch_add(1, std::memory_order_relaxed);
}

ModeGuard::~ModeGuard() {
  t_mode = saved_;
  detail::g_mode_overrides.fetch_sub(1, std::memory_order_relaxed);
}

void log_event(const char* kind, const std::string& message) {
  std::fprintf(stderr, "[fastdyn] %s: %s\n", kind, message.c_str());
  std::fflush(stderr);
}

}  // namespace fastdyn::eval_hook
