// eval_hook/config.cpp — see config.h.
#include "eval_hook/config.h"

#include <Python.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "codegen/loop/passes.h"
#include "runtime/env_flag.h"

namespace fastdyn::eval_hook {
namespace detail {
Request g_process;
std::atomic<int> g_mode_overrides{0};
}  // namespace detail

namespace {
thread_local ThreadMode t_mode;
}  // namespace

Config& config() {
  static Config c;
  return c;
}

std::atomic<uint64_t>& backend_failures() {
  static std::atomic<uint64_t> n{0};
  return n;
}

Stats& stats() {
  static Stats s;
  return s;
}

namespace {

// Every FASTDYN_* environment setting, in one table: its kind and, for lists and flags, the
// values it accepts. A mistake in one (FASTDYN_LOG=grpah_breaks) is reported once, at import,
// naming the valid values; it is not silently ignored.
enum class SettingKind : uint8_t { Flag, List, Count, Text };  // Count: a positive integer
struct Setting {
  const char* name;
  SettingKind kind;
  std::vector<const char*> values;  // List: the names it accepts
};
const char* const kFlagValues[] = {"1", "0", "on", "off", "true", "false", "yes", "no"};
const char* const kLogValues[] = {"graph_breaks", "recompiles", "guards", "graphs", "code", "all"};

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = {
      {"FASTDYN_LOG", SettingKind::List, {std::begin(kLogValues), std::end(kLogValues)}},
      {"FASTDYN_DUMP", SettingKind::List, {std::begin(codegen::loop::kDumpPasses), std::end(codegen::loop::kDumpPasses)}},
      {"FASTDYN_BACKGROUND_COMPILE", SettingKind::Flag, {}},
      {"FASTDYN_STRICT", SettingKind::Flag, {}},
      {"FASTDYN_RECOMPILE_LIMIT", SettingKind::Count, {}},
      {"FASTDYN_KERNEL_CACHE_SIZE", SettingKind::Count, {}},
      {"FASTDYN_COMPILE_THREADS", SettingKind::Count, {}},  // background compile threads (runtime/background_compiler.h)
      {"FASTDYN_TIME_PASSES", SettingKind::Flag, {}},
      {"FASTDYN_PREPACK", SettingKind::Flag, {}},
      {"FASTDYN_CHANNELS_LAST", SettingKind::Flag, {}},
      {"FASTDYN_PERF_MAP", SettingKind::Flag, {}},
      {"FASTDYN_SEGV_BACKTRACE", SettingKind::Flag, {}},  // a crash prints the native stack (pymodule)
      {"FASTDYN_NVRTC", SettingKind::Text, {}},           // the NVRTC library file (runtime/cuda/cuda_api.h)
      {"FASTDYN_NVRTC_OPTIONS", SettingKind::Text, {}},   // NVRTC options added to the backend's (bench/nvrtc_options.py)
      {"FASTDYN_DISABLE", SettingKind::Flag, {}},
      {"FASTDYN_CACHE_DIR", SettingKind::Text, {}},
      {"FASTDYN_LLVM_ARGS", SettingKind::Text, {}},
      {"FASTDYN_LLVM_PIPELINE", SettingKind::Text, {}},
      {"FASTDYN_VECTOR_BITS", SettingKind::Text, {}},
      {"FASTDYN_MASKED_TAIL", SettingKind::Flag, {}},
      {"FASTDYN_REPORT", SettingKind::Text, {}},  // the HTML report's file (python/fastdyn/report.py)
      {"FASTDYN_CHECK", SettingKind::Flag, {}},   // accuracy mode (runtime/accuracy_check.h)
      {"FASTDYN_BUILD_TESTS", SettingKind::Text, {}},  // setup.py's
      {"FASTDYN_BUILD_JOBS", SettingKind::Text, {}},
      {"FASTDYN_CPYTHON_TESTS", SettingKind::Text, {}},  // the test suite's
      {"FASTDYN_CPYTHON_SERIAL", SettingKind::Flag, {}},
      {"FASTDYN_CPYTHON_TENSOR_FREE", SettingKind::Flag, {}},
      {"FASTDYN_DIFFTEST_N", SettingKind::Text, {}},
  };
  return table;
}

std::string joined(const std::vector<const char*>& v) {
  std::string s;
  for (const char* x : v) s += std::string(s.empty() ? "" : ", ") + x;
  return s;
}

// Items of a comma-separated list, empty items dropped.
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) out.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

bool contains(const std::vector<const char*>& v, const std::string& x) {
  for (const char* s : v)
    if (x == s) return true;
  return false;
}

// A UserWarning (stderr where warnings are errors: a setting must not stop the import).
void warn_setting(const std::string& message) {
  if (PyErr_WarnEx(PyExc_UserWarning, ("fastdyn: " + message).c_str(), 1) < 0) {
    PyErr_Clear();
    log_event("config", message);
  }
}

}  // namespace

int count_value(const std::string& text) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(text);
}

bool flag_value(const char* text) { return !runtime::is_off_word(text); }

std::vector<std::string> check_environment() {
  std::vector<std::string> problems;
  const std::vector<const char*> flags(std::begin(kFlagValues), std::end(kFlagValues));
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    if (entry.rfind("FASTDYN_", 0) != 0) continue;
    const size_t eq = entry.find('=');
    const std::string name = entry.substr(0, eq), value = eq == std::string::npos ? "" : entry.substr(eq + 1);
    const Setting* s = nullptr;
    for (const Setting& x : settings())
      if (name == x.name) s = &x;
    if (!s) {
      std::vector<const char*> names;
      for (const Setting& x : settings()) names.push_back(x.name);
      problems.push_back("unknown setting " + name + " (known: " + joined(names) + ")");
      continue;
    }
    if (s->kind == SettingKind::Flag && !value.empty() && !contains(flags, value))
      problems.push_back(name + "=" + value + " is not a flag (valid: " + joined(flags) + ")");
    if (s->kind == SettingKind::Count && count_value(value) <= 0)
      problems.push_back(name + "=" + value + " is not a positive integer");
    if (s->kind == SettingKind::List)
      for (const std::string& item : split_list(value))
        if (!contains(s->values, item))
          problems.push_back(name + ": unknown value '" + item + "' (valid: " + joined(s->values) + ")");
  }
  return problems;
}

void load_config_from_env() {
  Config& c = config();
  for (const std::string& p : check_environment()) warn_setting(p);
  if (const char* bg = std::getenv("FASTDYN_BACKGROUND_COMPILE")) c.background_compile = flag_value(bg);
  if (const char* strict = std::getenv("FASTDYN_STRICT")) c.strict = flag_value(strict);
  if (const char* limit = std::getenv("FASTDYN_RECOMPILE_LIMIT"))
    if (count_value(limit) > 0) c.recompile_limit = count_value(limit);
  const char* env = std::getenv("FASTDYN_LOG");
  if (!env) return;
  for (const std::string& item : split_list(env)) {
    const bool all = item == "all";
    if (all || item == "graph_breaks") c.log_graph_breaks = true;
    if (all || item == "recompiles") c.log_recompiles = true;
    if (all || item == "guards") c.log_guards = true;
    if (all || item == "graphs") c.log_graphs = true;
    if (all || item == "code") c.log_code = true;
  }
}

void set_process_mode(const Request& r) { detail::g_process = r; }

const Request& detail::thread_request() {
  const ThreadMode& t = t_mode;
  return t.overridden ? t.request : g_process;
}

ModeGuard::ModeGuard(const Request& r) : saved_(t_mode) {
  t_mode.request = r;
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
