// symbolic/continuation.h — graph breaks in bytecode.
//
// When a trace stops at a root instruction it cannot capture (TraceResult::stopped), the frame
// is replaced by code that
//   1. calls the graph recorded so far, keeping its output tuple in a spare local;
//   2. rebuilds the live locals and the value stack the original had before the instruction,
//      from graph outputs, trace-time constants and the places inputs were read from;
//   3. runs the instruction itself, exactly as the original code would (a CALL, a conditional
//      jump on a tensor, a store...);
//   4. calls a continuation for each way the instruction can go on and returns its result
//      (through a trampoline: a continuation's own transformed code returns its continuation
//      call for the trampoline to make, so that a loop that breaks at every iteration does
//      not nest a call per iteration).
// A continuation ("resume function") is the original code object with a prologue: its one
// parameter is a list of the original's locals followed by the non-NULL stack items; the
// prologue unpacks it into its slots and empties it (the caller's stack holds the list until the
// call returns: holding the values would keep alive what the continuation drops), deletes the
// locals that were unbound, pushes the stack (NULLs included) and jumps to the instruction after
// the break. A trace of a continuation records the emptying as an effect (is_resume_prologue). The body keeps the original's bytes, constants, names, line
// table and exception table (shifted), so tracebacks name the user's function and line. It is
// an ordinary function: the hook catches and compiles it in turn.
#pragma once
#include <Python.h>

#include <string>
#include <vector>

#include "codegen/graph/graph.h"
#include "symbolic/interpreter.h"

namespace fastdyn::symbolic {

// The tensors the rebuilt state (stack, locals, side effects, return value) needs from the graph
// (values not read from an input's source), in the order the transformed code indexes the graph's output tuple.
std::vector<codegen::ValueId> break_outputs(const TraceResult& trace);

// Whether instruction `inst` (an index into decode(code)) of `code` is in the prologue of a
// continuation made by assemble_break.
bool is_resume_prologue(PyCodeObject* code, size_t inst);
// The sizes the traces of a continuation's resume point saw (automatic dynamic), shared by the
// continuations made there for different sets of unbound locals; nullptr when `code` is not a
// continuation. forget_resume_shape_histories() empties them all (fastdyn.reset()).
ShapeHistory* resume_shape_history(PyCodeObject* code);
void forget_resume_shape_histories();
// Whether `code` is a continuation that resumes inside a loop's body (called once per iteration).
bool resumes_inside_loop(PyCodeObject* code);

// The transformed code of a frame that broke. `graph` (borrowed) returns a tuple of `outputs`,
// or is nullptr when nothing was recorded before the break. `globals` (borrowed) are the frame's.
// Returns nullptr and sets *why when the state at the break cannot be rebuilt in bytecode.
PyCodeObject* assemble_break(PyCodeObject* orig, const TraceResult& trace, PyObject* graph,
                             const std::vector<codegen::ValueId>& outputs, PyObject* globals,
                             std::string* why);

// The transformed code of a frame traced to its return whose result or side effects need
// bytecode (attribute writes to replay, a dataclass to construct): graph call, effects, the
// return value rebuilt. nullptr and *why when it cannot be rebuilt.
PyCodeObject* assemble_return(PyCodeObject* orig, const TraceResult& trace, PyObject* graph,
                              const std::vector<codegen::ValueId>& outputs, PyObject* globals, std::string* why);

}  // namespace fastdyn::symbolic
