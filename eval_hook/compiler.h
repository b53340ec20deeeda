// eval_hook/compiler.h — compile-on-miss: trace a frame, compile its graph, build its guards and
// transformed code, and package the result as a cache entry.
#pragma once
#include <Python.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "eval_hook/code_state.h"
#include "symbolic/interpreter.h"

namespace fastdyn::eval_hook {

struct CompileOutcome {
  enum class Kind : uint8_t {
    Compiled,    // entry is set
    NoTensors,   // the frame records no tensor op: skip it for good
    Unsupported, // capture failed: reason/filename/lineno say where; run eagerly
  };
  Kind kind = Kind::Unsupported;
  bool broke = false;  // Compiled, with a graph break: reason/filename/lineno say where
  bool retry_later = false;  // Unsupported for now (TraceResult::retry_later): trace again later
  bool raises = false;       // Unsupported because the frame raises on this path (TraceResult::raises): no graph break
  int graph_ops = 0;   // ops in the entry's graph (0: nothing recorded before the break)
  std::unique_ptr<CacheEntry> entry;
  std::string reason;
  std::string filename;
  int lineno = -1;
  std::vector<std::string> node_locations;  // the report's: each graph op's Python line (journal on)
};

// Traces and compiles the frame, its graph for `backend` (the request: enable()'s or the jit
// wrapper's). Must be called with the hook off for this thread. Throws only fastdyn
// InternalError/BackendError.
CompileOutcome compile_frame(const symbolic::FrameInputs& frame, const Target& target);

// What fastdyn.explain reports: every graph compiled and every break met while it runs the
// function once (hook.h's set_explain_recorder).
struct ExplainReport {
  int graph_count = 0;
  int graph_break_count = 0;
  std::vector<std::string> break_reasons;  // parallel with filenames/linenos
  std::vector<std::string> break_filenames;
  std::vector<int> break_linenos;
  std::vector<std::map<std::string, int>> op_counts;
  std::vector<std::string> guards;
  std::vector<std::string> graphs;  // graph text
  std::vector<std::vector<std::string>> graph_inputs;  // per graph: each input's source (L['x'])
  std::vector<std::string> code;    // per graph: the backend's program (kernels, extern calls)
};
// Adds one compile outcome to a report.
void record_outcome(ExplainReport& r, const CompileOutcome& out);

}  // namespace fastdyn::eval_hook
