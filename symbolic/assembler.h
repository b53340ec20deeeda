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
#include <unordered_map>
#include <vector>

#include "symbolic/interpreter.h"

namespace fastdyn::symbolic {

// A tiny assembler: append instructions by opcode number, get the code bytes, line table and
// stack depth. Inline cache entries and EXTENDED_ARG prefixes are emitted automatically.
// Forward jumps go to labels; their arguments are resolved when the bytes are made.
// A source position as co_positions() gives it; col < 0: none.
struct Position {
  int line = -1, end_line = -1, col = -1, end_col = -1;
};

class Assembler {
 public:
  void emit(uint8_t opcode, int arg, int line);
  void emit(uint8_t opcode, int arg, const Position& pos);  // with columns (traceback carets)
  int new_label();
  void bind(int label);                                  // the next instruction
  void emit_jump(uint8_t opcode, int label, int line);   // a forward relative jump
  PyObject* code_bytes();         // new reference (bytes)
  PyObject* line_table(int first_line);  // new reference (bytes), 3.11+ locations format
  int max_stack_depth() const;    // from the interpreter's own stack effects, following jumps
  // An exception-table entry: instructions in [start, end) jump to `target` with the stack cut
  // to `depth` (then lasti, if asked, and the exception pushed). Entries are added in code order
  // and must not overlap.
  void add_handler(int start_label, int end_label, int target_label, int depth, bool lasti);
  PyObject* exception_table();    // new reference (bytes), the 3.11+ format

 private:
  struct Item { uint8_t opcode; int arg; int line; int label = -1; Position pos; };
  struct Handler { int start, end, target, depth; bool lasti; };
  void resolve();
  std::vector<Item> items_;
  std::vector<int> label_at_;     // label -> item index it is bound before
  std::vector<Handler> handlers_;
};

// One exception-table varint (most significant 6-bit group first; `first` marks an entry's start).
void write_exception_varint(std::string& out, int v, bool first);

// Builds a code object's constants, names and instructions; loads values from Sources.
class CodeBuilder {
 public:
  CodeBuilder(int line, int free_base);
  ~CodeBuilder();
  CodeBuilder(const CodeBuilder&) = delete;
  CodeBuilder& operator=(const CodeBuilder&) = delete;

  Assembler& as() { return as_; }
  int line() const { return line_; }
  void emit(uint8_t opcode, int arg) { as_.emit(opcode, arg, line_); }
  void load_const(PyObject* obj);
  // With `cached`: a path found there (by source_key) is that local's value (LOAD_FAST), its
  // steps not repeated.
  void load_source(const Source& s, const std::unordered_map<std::string, int>* cached = nullptr);
  // A graph's inputs, in order, onto the stack: each of `shared` (shared_paths(inputs)) first
  // evaluated once into local first_slot + k, and read from there.
  void load_inputs(const std::vector<std::shared_ptr<Source>>& inputs, const std::vector<const Source*>& shared, int first_slot);
  void load_closure(int free_index);  // the cell of the frame's free variable `free_index`
  void store_deref(int free_index);   // STORE_DEREF into the frame's free variable `free_index`
  void delete_deref(int free_index);  // DELETE_DEREF of the frame's free variable `free_index`
  PyObject* globals() const { return globals_; }  // the frame's globals (borrowed), if given
  void set_globals(PyObject* g) { globals_ = g; }
  void load_attr(const std::string& name);
  void call(int nargs);          // [PRECALL n] CALL n
  void call_kw(int nargs, PyObject* kw_names);  // the last len(kw_names) arguments are keywords
  int name_index(const std::string& name);
  int const_index(PyObject* obj);
  PyObject* consts_tuple() const;  // new references
  PyObject* names_tuple() const;

 private:
  Assembler as_;
  PyObject* consts_;
  PyObject* names_;
  int line_;
  int free_base_;
  PyObject* globals_ = nullptr;
};

// The attribute and item paths that two or more of a graph's inputs pass through, parents
// before children (`args[0].param_groups[0]['params']` for each parameter of an optimizer step):
// read once each by load_inputs, where each input read from the frame's arguments down was most
// of the transformed code's time (a 96-parameter step: 1500 subscripts).
std::vector<const Source*> shared_paths(const std::vector<std::shared_ptr<Source>>& inputs);

// Returns a new reference to the transformed code object for `orig`, calling `graph` (borrowed;
// the code holds a strong reference in its constants).
PyCodeObject* assemble_graph_call(PyCodeObject* orig, const TraceResult& trace, PyObject* graph);

// A code object for `orig`'s function from what `b` built: `argcount` positional parameters,
// `varnames` (borrowed) its locals, orig's free variables, no cells, an empty exception table.
// The position of the instruction at code unit `index` of `code`.
Position position_of(PyCodeObject* code, int index);

PyCodeObject* make_code(PyCodeObject* orig, CodeBuilder& b, int argcount, PyObject* varnames, int flags);

// Number of argument slots of a code object (positional, keyword-only, *args, **kwargs).
int argument_slots(PyCodeObject* code);

}  // namespace fastdyn::symbolic
