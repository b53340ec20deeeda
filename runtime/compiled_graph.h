// runtime/compiled_graph.h — a compiled graph as a Python callable (one C call from bytecode).
//
// The transformed bytecode calls it with the graph inputs (tensors, positional) and gets back
// the Python value the traced code produced: an OutputTemplate says how to assemble it from the
// graph's outputs and trace-time constants (a tensor, a tuple of tensors and constants, ...).
// It is a native type with vectorcall: no Python frame, no per-op Python.
#pragma once
#include <cstdint>
#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/executable.h"

namespace fastdyn::runtime {

struct OutputTemplate {
  enum class Kind : uint8_t { Output, Constant, Tuple, List, NamedTuple };
  Kind kind = Kind::Constant;
  int output = -1;                        // Output: index into the executable's outputs
  PyObject* constant = nullptr;           // Constant: strong reference; NamedTuple: its type
  std::vector<OutputTemplate> items;      // Tuple/List/NamedTuple
  // NamedTuple: made by tuple.__new__(type, items) (a namedtuple: no Python frame), else by
  // type(items) (struct sequences, torch.Size).
  bool tuple_new = false;

  OutputTemplate() = default;
  OutputTemplate(const OutputTemplate& o);
  OutputTemplate& operator=(const OutputTemplate& o);
  ~OutputTemplate();
};

// Returns a new reference to a callable wrapping `exe`. `name` shows in its repr.
PyObject* make_compiled_graph(ExecutablePtr exe, OutputTemplate out, std::string name);
bool is_compiled_graph(PyObject* obj);
// Borrowed view of the executable behind a compiled-graph object (nullptr if not one).
Executable* compiled_graph_executable(PyObject* obj);
// A test hook: the next `runs` compiled-graph calls on this thread fail with an InternalError
// before running (a compiler bug at run time, for the tests of what such a failure does).
void test_fail_graph_runs(int runs);

}  // namespace fastdyn::runtime
