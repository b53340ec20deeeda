// symbolic/assembler.h — bytecode assembly of transformed code objects.
//
// The transformed code of a fully captured frame loads the graph inputs from where the trace
// found them (arguments, globals, closure cells, attributes), calls the compiled graph once and
// returns what it returns. Its parameters are the original frame's argument slots, in slot
// order, as plain positional parameters (so the hook can pass localsplus straight through);
// its free variables are the original's. Line table and stack size are computed, the exception
// table is empty.
#pragma once
#include <Python.h>

#include <string>
#include <vector>

#include "symbolic/interpreter.h"

namespace fastdyn::symbolic {

// A tiny assembler: append instructions by opcode number, get the code bytes, line table and
// stack depth. Inline cache entries and EXTENDED_ARG prefixes are emitted automatically.
class Assembler {
 public:
  void emit(uint8_t opcode, int arg, int line);
  PyObject* code_bytes() const;   // new reference (bytes)
  PyObject* line_table(int first_line) const;  // new reference (bytes), 3.11+ locations format
  int max_stack_depth() const;    // from the interpreter's own stack effects

 private:
  struct Item { uint8_t opcode; int arg; int line; };
  std::vector<Item> items_;
};

// Returns a new reference to the transformed code object for `orig`, calling `graph` (borrowed;
// the code holds a strong reference in its constants).
PyCodeObject* assemble_graph_call(PyCodeObject* orig, const TraceResult& trace, PyObject* graph);

// Number of argument slots of a code object (positional, keyword-only, *args, **kwargs).
int argument_slots(PyCodeObject* code);

}  // namespace fastdyn::symbolic
