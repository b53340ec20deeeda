// symbolic/interpreter.h — the symbolic interpreter: traces one frame's bytecode into a graph.
//
// Algorithm. Starting at the first instruction with the frame's arguments as inputs, execute
// each instruction on symbolic values (values.h): Python constants are computed for real
// (folding shape arithmetic), tensor operations are recorded into a codegen::Graph through the
// op table (codegen::record_call) whose C++ rules give every output's metadata, and every value
// read from outside the frame (arguments, globals, builtins, closure cells, attributes of those)
// is recorded with a guard. The trace ends at RETURN_VALUE/RETURN_CONST. In this version it
// covers straight-line code: any instruction or call it cannot handle ends the trace with a
// reason (file, line, what), and the caller runs the frame eagerly.
// The trace never executes user code with side effects: only side-effect-free folding of
// builtin constants and attribute reads of modules, classes and plain instance dicts.
#pragma once
#include <Python.h>

#include <map>
#include <string>
#include <vector>

#include "codegen/graph.h"
#include "symbolic/values.h"

namespace fastdyn::symbolic {

// What the interpreter sees of the frame; all borrowed.
struct FrameInputs {
  PyCodeObject* code = nullptr;
  PyObject* const* localsplus = nullptr;  // argument slots are valid
  PyObject* globals = nullptr;
  PyObject* builtins = nullptr;
  PyObject* closure = nullptr;            // tuple of cells or nullptr
};

enum class GuardKind : uint8_t { TypeIs, IdIs, Equals, Tensor, TypeAndLen };

// One guard the trace relies on: `kind` of the object at `source`.
struct GuardSpec {
  SourcePtr source;
  GuardKind kind = GuardKind::TypeIs;
  PyObject* obj = nullptr;  // the object seen at trace time (strong)
};

struct TraceResult {
  bool ok = false;
  std::string reason;    // why the trace stopped, when !ok
  std::string filename;  // where it stopped
  int lineno = -1;

  codegen::Graph graph;
  std::vector<SourcePtr> input_sources;  // graph input i is loaded from input_sources[i]
  std::vector<GuardSpec> guards;
  SymValue return_value;

  TraceResult() = default;
  TraceResult(const TraceResult&) = delete;
  TraceResult& operator=(const TraceResult&) = delete;
  TraceResult(TraceResult&&) = default;
  TraceResult& operator=(TraceResult&&) = default;
  ~TraceResult();
};

// Traces the frame. Never throws for unsupported code (it returns !ok with the reason); may
// throw InternalError for fastdyn bugs. Leaves no Python exception set.
TraceResult trace_frame(const FrameInputs& frame);

// Readable source path: "L['x']", "G['torch'].relu".
std::string source_name(const Source& s);

}  // namespace fastdyn::symbolic
