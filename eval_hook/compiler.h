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

  // A graph break, as stats(), explain() and the report count them: a frame that runs as written
  // (not one that raises on this path), or a break that ends a graph. A break with nothing
  // recorded before it splits no graph and is not counted (Dynamo's count too: `print(); return
  // x + 1` has none), though its continuation is compiled as any other.
  bool counts_as_graph_break() const {
    return (kind == Kind::Unsupported && !raises) || (broke && graph_ops > 0);
  }
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
  std::vector<std::string> break_reasons;  // parallel with filenames/linenos/counted
  std::vector<std::string> break_filenames;
  std::vector<int> break_linenos;
  std::vector<bool> break_counted;  // false: a break with nothing recorded before it (not counted)
  std::vector<std::map<std::string, int>> op_counts;
  std::vector<std::string> guards;
  std::vector<std::string> graphs;  // graph text
  std::vector<std::vector<std::string>> graph_inputs;  // per graph: each input's source (L['x'])
  std::vector<std::string> code;    // per graph: the backend's program (kernels, extern calls)
};
// Adds one compile outcome to a report.
void record_outcome(ExplainReport& r, const CompileOutcome& out);

}  // namespace fastdyn::eval_hook
