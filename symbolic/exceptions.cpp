// symbolic/exceptions.cpp — a raise the trace itself handles: the try/except of a traced frame
// that catches a Raised (symbolic/tracer.h). The opcodes of the handler it jumps to
// (PUSH_EXC_INFO, CHECK_EXC_MATCH, POP_EXCEPT, RERAISE) are interpreter.cpp's.
#include <cstring>

#include "symbolic/opcodes.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {

bool Tracer::handle_raised(const Raised& r, size_t index) {
  FrameState& f = *frames_[index];
  if (!r.value) return false;
  // The inlined calls it leaves must have no block of their own there (a with block's __exit__,
  // a finally: not traced); nor may the handler be a with block's cleanup.
  for (size_t k = index + 1; k < frames_.size(); ++k) {
    const FrameState& g = *frames_[k];
    if (g.pc < g.insts.size() && !enclosing_handlers(g.code, g.insts[g.pc].index).empty()) return false;
  }
  const std::vector<ExceptionEntry> handlers = enclosing_handlers(f.code, f.insts[f.pc].index);
  if (handlers.empty()) return false;
  const ExceptionEntry& e = handlers.front();
  if (e.target < 0 || static_cast<size_t>(e.target) >= f.inst_at.size()) return false;
  const int target = f.inst_at[static_cast<size_t>(e.target)];
  if (target < 0 || static_cast<size_t>(e.depth) > f.stack.size()) return false;
  auto name_at = [&](size_t i) { return i < f.insts.size() ? opcode_info(f.insts[i].opcode).name : ""; };
  if (!std::strcmp(name_at(static_cast<size_t>(target) + 1), "WITH_EXCEPT_START")) return false;
  frames_.resize(index + 1);
  f.stack.resize(static_cast<size_t>(e.depth));
  if (e.lasti) {
    PyOwned lasti(PyLong_FromLong(f.insts[f.pc].index));
    f.stack.push_back(constant(lasti.p));
  }
  // Marked as the trace's own object (calls.cpp marks the exceptions it makes): a handler that
  // names it (`except E as e`) may read it, but it never leaves the trace as a constant every
  // call would share (continuation.cpp refuses to rebuild it), nor shows a traceback it lacks.
  SymValue exc = constant(r.value.get());
  exc.name = kTraceException;
  f.stack.push_back(std::move(exc));
  f.next_pc = static_cast<size_t>(target);
  entering_handler_ = true;
  return true;
}

namespace {

// Whether an except clause naming `cls` (a class or a tuple of them) catches what a graph op can
// raise at run time, from its data rather than its metadata: an index out of range (IndexError),
// an overlap or a failed check (RuntimeError), a value (ValueError, TypeError), memory
// (torch.OutOfMemoryError, a RuntimeError). Not NotImplementedError alone: ATen raises it for a
// kernel that does not exist for a dtype or device (transformers' `except NotImplementedError`
// around a static cache's index_copy_, for MPS).
bool catches_a_run_time_error(PyObject* cls) {
  if (PyTuple_Check(cls)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(cls); ++i)
      if (catches_a_run_time_error(PyTuple_GET_ITEM(cls, i))) return true;
    return false;
  }
  if (!PyType_Check(cls)) return true;
  for (PyObject* raised : {PyExc_RuntimeError, PyExc_IndexError, PyExc_ValueError, PyExc_TypeError}) {
    const int r = PyObject_IsSubclass(raised, cls);
    if (r != 0) return PyErr_Clear(), true;
  }
  const int runtime = PyObject_IsSubclass(cls, PyExc_RuntimeError);
  const int not_implemented = PyObject_IsSubclass(cls, PyExc_NotImplementedError);
  PyErr_Clear();
  return runtime != 0 && not_implemented != 1;
}

// The handler at instruction t of f: whether it is an except clause (3.11/3.12: PUSH_EXC_INFO,
// then per clause the classes loaded, CHECK_EXC_MATCH and a jump to the next clause; a bare
// except drops the exception with POP_TOP) that may catch a run-time error. A finally clause or
// a with block's __exit__ re-raises; a class it cannot read at trace time (`except self.Error`)
// counts as catching.
bool except_clauses_catch(const FrameState& f, size_t t) {
  // The opcode of instruction i, CACHE (0, never an instruction) past the end.
  auto op_at = [&](size_t i) { return i < f.insts.size() ? f.insts[i].opcode : static_cast<uint8_t>(op::CACHE); };
  if (op_at(t) != op::PUSH_EXC_INFO) return false;  // 3.12's inlined comprehension restoring its variable
  static PyObject* const builtins = PyImport_ImportModule("builtins");  // NB: kept for the process
  size_t i = t + 1;
  for (int clause = 0; clause < 64; ++clause) {
    if (op_at(i) == op::POP_TOP) return true;  // a bare except
    struct Stack {  // the classes loaded, owned (nullptr: not found)
      std::vector<PyObject*> v;
      ~Stack() { for (PyObject* o : v) Py_XDECREF(o); }
    } stack;
    bool known = true;
    for (; op_at(i) != op::CHECK_EXC_MATCH; ++i) {
      if (i >= f.insts.size()) return true;
      const Instruction& in = f.insts[i];
      if (in.opcode == op::PUSH_NULL || in.opcode == op::NOP) continue;
      if (in.opcode == op::LOAD_GLOBAL || in.opcode == op::LOAD_NAME) {
        PyObject* name = PyTuple_GET_ITEM(f.code->co_names, in.opcode == op::LOAD_GLOBAL ? in.arg >> 1 : in.arg);
        PyObject* v = f.globals ? PyDict_GetItemWithError(f.globals, name) : nullptr;  // borrowed
        PyObject* found = v ? Py_NewRef(v) : builtins ? PyObject_GetAttr(builtins, name) : nullptr;
        known = known && found;
        stack.v.push_back(found);
      } else if (in.opcode == op::LOAD_ATTR && !stack.v.empty()) {
        PyObject* name = PyTuple_GET_ITEM(f.code->co_names, python_minor() >= 12 ? in.arg >> 1 : in.arg);
        PyObject* attr = stack.v.back() ? PyObject_GetAttr(stack.v.back(), name) : nullptr;
        known = known && attr;
        Py_XSETREF(stack.v.back(), attr);
      } else if (in.opcode == op::BUILD_TUPLE && static_cast<size_t>(in.arg) <= stack.v.size()) {
        PyObject* tuple = PyTuple_New(in.arg);
        const size_t first = stack.v.size() - static_cast<size_t>(in.arg);
        for (int k = 0; k < in.arg; ++k) {
          PyObject* item = stack.v[first + static_cast<size_t>(k)];
          PyTuple_SET_ITEM(tuple, k, item ? item : Py_NewRef(Py_None));
        }
        stack.v.resize(first);  // the tuple holds their references now
        stack.v.push_back(tuple);
      } else if (!std::strncmp(opcode_info(in.opcode).name, "LOAD_", 5)) {
        stack.v.push_back(nullptr);  // a class from a local or a cell: not read at trace time
        known = false;
      } else {
        // Not a class expression: the first clause is a finally clause's statements (no
        // CHECK_EXC_MATCH); a later one is code the reader does not know.
        return clause != 0;
      }
    }
    PyErr_Clear();
    if (!known || stack.v.empty() || !stack.v.back() || catches_a_run_time_error(stack.v.back())) return true;
    // The clause's test: a jump past its body to the next clause, or to the RERAISE that ends them.
    if (i + 1 >= f.insts.size() || !(opcode_info(f.insts[i + 1].opcode).flags & kJumpRelative)) return true;
    const int next = instruction_at(f.insts, jump_target(f.insts[i + 1]));
    if (next < 0) return true;
    i = static_cast<size_t>(next);
    if (op_at(i) == op::RERAISE) return false;
  }
  return true;
}

}  // namespace

bool Tracer::inside_try_except() const {
  for (const auto& fp : frames_) {
    const FrameState& f = *fp;
    if (f.pc >= f.insts.size() || PyBytes_GET_SIZE(f.code->co_exceptiontable) == 0) continue;
    if (f.try_pc != f.pc) {
      f.try_pc = f.pc;
      f.try_at_pc = false;
      for (const ExceptionEntry& e : enclosing_handlers(f.code, f.insts[f.pc].index)) {
        const int t = e.target < 0 || static_cast<size_t>(e.target) >= f.inst_at.size() ? -1 : f.inst_at[static_cast<size_t>(e.target)];
        if (t < 0 || except_clauses_catch(f, static_cast<size_t>(t))) {
          f.try_at_pc = true;
          break;
        }
      }
    }
    if (f.try_at_pc) return true;
  }
  return false;
}

}  // namespace fastdyn::symbolic
