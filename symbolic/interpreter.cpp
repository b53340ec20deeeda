// symbolic/interpreter.cpp — the instruction loop and its handlers (algorithm in interpreter.h).
//
// Handlers are small functions grouped by family (loads/stores, stack, operators, subscripts,
// building, control flow, functions and cells, calls, returns) and registered by opcode NAME in
// one table; names the target Python lacks are skipped, so 3.11- and 3.12-only opcodes share the
// table. Where the two versions encode an argument differently the handler tests python_minor().
// Calls, attribute reads and operators on values live in calls.cpp.
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DefaultDtype.h>

#include <array>
#include <cstring>
#include <set>

#include "runtime/errors.h"
#include "codegen/shapes/propagate.h"
#include "codegen/graph/source_location.h"
#include "runtime/guards.h"
#include "runtime/journal.h"
#include "symbolic/assembler.h"
#include "symbolic/calls.h"
#include "symbolic/continuation.h"
#include "symbolic/opcodes.h"
#include "symbolic/py_ops.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {

std::string source_name(const Source& s) {
  switch (s.kind) {
    case Source::Kind::Local: return "L['" + s.name + "']";
    case Source::Kind::Global: return "G['" + s.name + "']";
    case Source::Kind::Builtin: return "B['" + s.name + "']";
    case Source::Kind::Closure: return "C['" + s.name + "']";
    case Source::Kind::Attr: return source_name(*s.parent) + "." + s.name;
    case Source::Kind::Item: return source_name(*s.parent) + "[" + std::to_string(s.index) + "]";
    case Source::Kind::DictItem: return source_name(*s.parent) + (s.object ? "[" + s.name + "]" : "['" + s.name + "']");
    case Source::Kind::Const: return "K['" + s.name + "']";
  }
  return "?";
}

namespace {

constexpr int kMaxInstructions = 200000;  // unrolled loops included
// A trace that has run this many instructions without recording a tensor op is pure Python (a
// tensor-free loop, a parser...): giving up here keeps its one-time cost near 2 ms instead of the
// ~20 ms that running into kMaxInstructions costs, and the frame runs eagerly as it would anyway.
constexpr int kMaxInstructionsWithoutTensorOps = 20000;
constexpr int kMaxInlineDepth = 32;

}  // namespace

Tracer::Tracer(const FrameInputs& frame, TraceResult& result, int stop_at)
    : frame_(frame), result_(result), stop_at_(stop_at) {
  ctx_.grad_enabled = at::GradMode::is_enabled();
  ctx_.default_dtype = c10::typeMetaToScalarType(c10::get_default_dtype());
  ctx_.autocast = runtime::AutocastState::current();
  nargs_ = argument_slots(frame.code);
  auto f = std::make_unique<FrameState>();
  f->code = frame.code;
  f->globals = frame.globals;
  f->insts = decode(frame.code);
  f->locals.resize(static_cast<size_t>(frame.code->co_nlocalsplus));
  f->written.resize(static_cast<size_t>(frame.code->co_nlocalsplus), false);
  const int nfree = frame.code->co_nfreevars;
  const int first_free = frame.code->co_nlocalsplus - nfree;
  for (int i = 0; i < nfree; ++i) {
    if (!frame.closure) break;
    SymValue cell = SymValue::boxed(SymValue::Kind::Cell);
    cell.obj = Py_NewRef(PyTuple_GET_ITEM(frame.closure, i));
    auto src = std::make_shared<Source>();
    src->kind = Source::Kind::Closure;  // reads the cell's contents
    src->index = i;
    src->name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(frame.code->co_localsplusnames, first_free + i));
    cell.source = src;
    f->locals[static_cast<size_t>(first_free + i)] = std::move(cell);
  }
  frames_.push_back(std::move(f));
}

SymValue& Tracer::local(int i) {
  FrameState& f = fr();
  auto& s = f.locals[static_cast<size_t>(i)];
  auto name = [&] { return std::string(PyUnicode_AsUTF8(PyTuple_GET_ITEM(f.code->co_localsplusnames, i))); };
  auto in_resume_prologue = [&] { return frames_.size() == 1 && is_resume_prologue(f.code, f.pc); };
  if (!s && f.depth == 0 && i < nargs_ && !f.written[static_cast<size_t>(i)]) {
    PyObject* obj = frame_.localsplus[i];
    if (!obj) throw Unsupported("argument slot is empty");
    auto src = std::make_shared<Source>();
    src->kind = Source::Kind::Local;
    src->index = i;
    src->name = name();
    // A continuation's one argument, the list its prologue unpacks into the slots: its items are
    // wrapped where the trace reads them, not all of them here.
    struct Unread {
      bool& flag;
      Unread(bool& f, bool on) : flag(f) { flag = on; }
      ~Unread() { flag = false; }
    } unread(unread_items_, i == 0 && in_resume_prologue());
    s = wrap(obj, src);
    // **kwargs is made fresh for each call: the trace may change it freely (the items keep
    // their sources for guards). *args, a tuple, keeps its source: rebuilt, it would be
    // another object (`args is saved_args` must hold).
    const int first_star = frame_.code->co_argcount + frame_.code->co_kwonlyargcount;
    if (i >= first_star && !PyTuple_Check(obj)) s->source = nullptr;
  }
  if (!s) throw Unsupported("local variable '" + name() + "' read before assignment");
  // (The prologue's own loads of the stack items it pushes move them unread.)
  if (s->kind == SymValue::Kind::Unread && !in_resume_prologue()) read_unread(*s);
  return *s;
}

SymValue Tracer::pop() {
  auto& st = fr().stack;
  FD_CHECK(!st.empty(), "symbolic stack underflow");
  SymValue v = std::move(st.back());
  st.pop_back();
  // A continuation's stack item: read by whatever takes it, except a store to a local.
  if (v.kind == SymValue::Kind::Unread) {
    const FrameState& f = fr();
    if (f.pc >= f.insts.size() || f.insts[f.pc].opcode != op::STORE_FAST) read_unread(v);
  }
  return v;
}

SymValue& Tracer::top(int depth) {
  auto& st = fr().stack;
  FD_CHECK(static_cast<int>(st.size()) > depth, "symbolic stack underflow");
  SymValue& v = st[st.size() - 1 - static_cast<size_t>(depth)];
  if (v.kind == SymValue::Kind::Unread) read_unread(v);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Handlers

struct Handlers {
  using Fn = void (*)(Tracer&, const Instruction&);

  static PyObject* name_at(Tracer& t, int i) { return PyTuple_GET_ITEM(t.fr().code->co_names, i); }
  static std::string str_name(Tracer& t, int i) { return PyUnicode_AsUTF8(name_at(t, i)); }
  static std::string local_name(Tracer& t, int i) {
    return PyUnicode_AsUTF8(PyTuple_GET_ITEM(t.fr().code->co_localsplusnames, i));
  }

  // ---- no-ops and prologue
  // COPY_FREE_VARS is a no-op: free-variable slots hold their cells from the frame's start.
  static void nop(Tracer&, const Instruction&) {}

  // ---- loads and stores
  // The value in local slot i; the root frame's arguments are wrapped (and guarded) on first read.
  static SymValue& slot(Tracer& t, int i) { return t.local(i); }
  static void load_fast(Tracer& t, const Instruction& in) {
    // A continuation's number or string not read yet goes on the stack unread: what takes it
    // decides (isinstance/type: its type only, call(); anything else wraps it, Tracer::pop).
    const auto& s = t.fr().locals[static_cast<size_t>(in.arg)];
    if (s && s->kind == SymValue::Kind::Unread && plain_scalar(s->obj)) return t.push(*s);
    t.push(slot(t, in.arg));
  }
  static void mark_written(Tracer& t, int i) {
    if (t.fr().depth == 0) t.fr().written[static_cast<size_t>(i)] = true;
  }
  static void load_fast_and_clear(Tracer& t, const Instruction& in) {  // 3.12 comprehensions
    auto& s = t.fr().locals[static_cast<size_t>(in.arg)];
    if (s && s->kind == SymValue::Kind::Unread) slot(t, in.arg);  // wrapped where it is read
    mark_written(t, in.arg);
    t.push(s ? *s : SymValue::null());
    s.reset();
  }
  // NB: an argument overwritten before it is read is never wrapped, so it needs no guard.
  static void store_fast(Tracer& t, const Instruction& in) {
    mark_written(t, in.arg);
    SymValue v = t.pop();
    auto& s = t.fr().locals[static_cast<size_t>(in.arg)];
    if (v.is_null()) s.reset();
    else s = std::move(v);
  }
  static void delete_fast(Tracer& t, const Instruction& in) {
    // An unbound local (not an argument the trace has not read yet) raises UnboundLocalError.
    const bool unread_argument = t.fr().depth == 0 && in.arg < t.nargs_ && !t.fr().written[static_cast<size_t>(in.arg)];
    if (!t.fr().locals[static_cast<size_t>(in.arg)] && !unread_argument) throw Unsupported("del of an unbound local");
    mark_written(t, in.arg);
    t.fr().locals[static_cast<size_t>(in.arg)].reset();
  }
  static void load_const(Tracer& t, const Instruction& in) {
    t.push(Tracer::constant(PyTuple_GET_ITEM(t.fr().code->co_consts, in.arg)));
  }
  static void return_const(Tracer& t, const Instruction& in) {
    load_const(t, in);
    return_value(t, in);
  }
  static void load_global(Tracer& t, const Instruction& in) {
    const int namei = in.arg >> 1;
    if (in.arg & 1) t.push(SymValue::null());
    t.push(t.load_global(str_name(t, namei)));
  }
  static void store_global(Tracer& t, const Instruction& in) { t.store_global(str_name(t, in.arg), t.pop()); }
  static void load_attr(Tracer& t, const Instruction& in) {
    int namei = in.arg;
    bool method = false;
    if (python_minor() >= 12) {
      method = in.arg & 1;
      namei = in.arg >> 1;
    }
    SymValue owner = t.pop();
    SymValue v = t.load_attr(owner, str_name(t, namei));
    if (method) t.push(SymValue::null());
    t.push(std::move(v));
  }
  static void load_method(Tracer& t, const Instruction& in) {  // 3.11
    SymValue owner = t.pop();
    SymValue v = t.load_attr(owner, str_name(t, in.arg));
    t.push(SymValue::null());
    t.push(std::move(v));
  }
  static void load_super_attr(Tracer& t, const Instruction& in) {  // 3.12: super().name
    SymValue self = t.pop();
    SymValue cls = t.pop();
    SymValue super_fn = t.pop();
    SymValue sup = t.call(super_fn, {cls, self}, {});
    SymValue v = t.load_attr(sup, str_name(t, in.arg >> 2));
    if (in.arg & 1) t.push(SymValue::null());
    t.push(std::move(v));
  }

  // ---- cells
  static SymValue& cell_at(Tracer& t, int i) {
    SymValue& c = slot(t, i);
    if (c.kind != SymValue::Kind::Cell) throw Unsupported("cell variable slot without a cell");
    return c;
  }
  static void make_cell(Tracer& t, const Instruction& in) {
    auto& s = t.fr().locals[static_cast<size_t>(in.arg)];
    if ((!s && t.fr().depth == 0 && in.arg < t.nargs_) || (s && s->kind == SymValue::Kind::Unread))
      slot(t, in.arg);  // an argument that is a cell
    SymValue cell = SymValue::boxed(SymValue::Kind::Cell);
    if (s) cell.box->items.push_back(std::move(*s));
    s = std::move(cell);
  }
  static void load_closure(Tracer& t, const Instruction& in) { t.push(cell_at(t, in.arg)); }
  static void load_deref(Tracer& t, const Instruction& in) {
    SymValue& c = cell_at(t, in.arg);
    if (!c.box->items.empty() && c.box->items[0].is_null())
      throw Unsupported("free variable '" + local_name(t, in.arg) + "' referenced after its del");
    if (c.box->items.empty()) {
      if (!c.obj) throw Unsupported("free variable '" + local_name(t, in.arg) + "' referenced before assignment");
      PyObject* v = PyCell_GET(c.obj);
      if (!v) throw Unsupported("free variable '" + local_name(t, in.arg) + "' referenced before assignment");
      c.box->items.push_back(t.wrap(v, c.source));
    }
    t.push(c.box->items[0]);
  }
  static void store_deref(Tracer& t, const Instruction& in) { set_cell(t, in, t.pop()); }
  // `del x` of a cell variable: the cell empties (a NULL value: DELETE_DEREF after the graph for
  // the root frame's real cell). Deleting an empty one raises NameError: not traced.
  static void delete_deref(Tracer& t, const Instruction& in) {
    SymValue& c = cell_at(t, in.arg);
    const bool unbound = c.box->items.empty() ? !c.obj || !PyCell_GET(c.obj) : c.box->items[0].is_null();
    if (unbound) throw Unsupported("del of the unbound free variable '" + local_name(t, in.arg) + "'");
    set_cell(t, in, SymValue::null());  // the box holds NULL: deleted in the trace
  }
  static void set_cell(Tracer& t, const Instruction& in, SymValue v) {
    SymValue& c = cell_at(t, in.arg);
    // The root frame's free variable (a cell of the enclosing function, or of the frame a
    // continuation resumes; from a nested function too: root_free_cell): the real cell gets the
    // last value after the graph. Any other real cell (an inlined function's own) is not ours.
    if (c.obj && (!c.source || c.source->kind != Source::Kind::Closure))
      throw Unsupported("assignment to the enclosing function's variable '" + local_name(t, in.arg) + "'");
    if (c.obj) {
      if (v.kind == SymValue::Kind::Iterator || v.kind == SymValue::Kind::Cell)
        throw Unsupported("storing a " + describe(v) + " in the free variable '" + local_name(t, in.arg) + "'");
      auto& effects = t.result_.effects;
      auto same = std::find_if(effects.begin(), effects.end(), [&](const TraceResult::SideEffect& e) {
        return e.kind == TraceResult::SideEffect::Kind::SetCell && e.target.obj == c.obj;
      });
      if (same != effects.end()) same->value = v;
      else effects.push_back({c, "", v, TraceResult::SideEffect::Kind::SetCell});
    }
    c.box->items.assign(1, std::move(v));
  }

  // ---- stack
  static void pop_top(Tracer& t, const Instruction&) { t.pop(); }
  static void push_null(Tracer& t, const Instruction&) { t.push(SymValue::null()); }
  static void copy(Tracer& t, const Instruction& in) { t.push(t.top(in.arg - 1)); }
  static void swap(Tracer& t, const Instruction& in) { std::swap(t.top(0), t.top(in.arg - 1)); }
  static void end_for(Tracer& t, const Instruction&) {  // 3.12
    t.pop();
    t.pop();
  }

  // ---- operators
  static void binary_op(Tracer& t, const Instruction& in) {
    SymValue b = t.pop();
    SymValue a = t.pop();
    const char* sym = binary_op_symbol(in.arg);
    FD_CHECK(sym, "bad BINARY_OP oparg");
    t.push(t.binary(sym, a, b));
  }
  static void compare_op(Tracer& t, const Instruction& in) {
    SymValue b = t.pop();
    SymValue a = t.pop();
    const char* sym = compare_op_symbol(python_minor() >= 12 ? in.arg >> 4 : in.arg);
    FD_CHECK(sym, "bad COMPARE_OP oparg");
    t.push(t.binary(sym, a, b));
  }
  static bool same_object(Tracer& t, const SymValue& a, const SymValue& b) {
    using K = SymValue::Kind;
    if (a.is_constant() && b.is_constant()) {
      // Two instances guarded by type are the same object exactly as their alias guards say.
      // Against a fixed object, only a different type keeps the answer: else pin the instance.
      if (t.by_type(a) != t.by_type(b) && Py_TYPE(a.obj) == Py_TYPE(b.obj)) {
        t.pin(a);
        t.pin(b);
      }
      return a.obj == b.obj;
    }
    if (a.is_tensor() && b.is_tensor()) return a.tensor == b.tensor;
    if (a.box && b.box) return a.box == b.box;
    if (a.kind == K::Tuple || b.kind == K::Tuple || a.kind == K::NamedTuple || b.kind == K::NamedTuple)
      throw Unsupported("'is' on a tuple");
    return false;  // different kinds of value are different objects
  }
  // raise E(...) / raise E of a builtin exception (made for real from constants: calls.cpp):
  // Raised, which only a handler the trace stands for catches (objects.cpp); anywhere else it
  // is Unsupported, and the frame runs as written up to the raise.
  static void raise_varargs(Tracer& t, const Instruction& in) {
    if (in.arg == 0 && !t.handled_.empty() && t.handled_.back().is_constant()) {  // `raise` in an except block
      throw Raised::of(t.handled_.back().obj);
    }
    if (in.arg != 1) throw Unsupported(in.arg == 0 ? "a bare raise" : "raise ... from ...");
    SymValue e = t.pop();
    PyObject* type = !e.is_constant() ? nullptr
                     : PyExceptionInstance_Check(e.obj) ? reinterpret_cast<PyObject*>(Py_TYPE(e.obj))
                     : PyExceptionClass_Check(e.obj)   ? e.obj
                                                       : nullptr;
    if (!type || (reinterpret_cast<PyTypeObject*>(type)->tp_flags & Py_TPFLAGS_HEAPTYPE))
      throw Unsupported("raise of " + describe(e));
    PyObject* value = PyExceptionInstance_Check(e.obj) ? Py_NewRef(e.obj) : PyObject_CallNoArgs(type);
    if (!value) PyErr_Clear();
    throw Raised(type, std::string("raise ") + reinterpret_cast<PyTypeObject*>(type)->tp_name, value);
  }
  // An except block the trace entered (Tracer::handle_raised): the exception on the stack is a
  // constant, and so is what it is matched against.
  static void push_exc_info(Tracer& t, const Instruction&) {
    SymValue exc = t.pop();
    t.push(t.handled_.empty() ? Tracer::constant(Py_None) : t.handled_.back());
    t.handled_.push_back(exc);
    t.push(std::move(exc));
  }
  static void check_exc_match(Tracer& t, const Instruction&) {
    SymValue type = t.pop();
    const SymValue& exc = t.top(0);
    PyOwned classes(nullptr);
    if (type.kind == SymValue::Kind::Tuple) {
      classes.p = PyTuple_New(static_cast<Py_ssize_t>(type.items.size()));
      for (size_t i = 0; i < type.items.size(); ++i) {
        if (!type.items[i].is_constant()) throw Unsupported("except with " + describe(type));
        PyTuple_SET_ITEM(classes.p, static_cast<Py_ssize_t>(i), Py_NewRef(type.items[i].obj));
      }
    } else if (type.is_constant()) {
      classes.p = Py_NewRef(type.obj);
    }
    if (!classes.p || !exc.is_constant() || !PyExceptionInstance_Check(exc.obj)) throw Unsupported("except with " + describe(type));
    // A clause that names the exception (`except E as e`) gets the trace's own object, marked
    // (Tracer::handle_raised) so that it is read in the trace and never handed to run time.
    const bool matches = PyErr_GivenExceptionMatches(exc.obj, classes.p);
    t.push(Tracer::constant(matches ? Py_True : Py_False));
  }
  static void pop_except(Tracer& t, const Instruction&) {
    t.pop();  // the exception handled before this block (pushed by PUSH_EXC_INFO)
    if (!t.handled_.empty()) t.handled_.pop_back();
  }
  static void reraise(Tracer& t, const Instruction& in) {
    SymValue exc = t.pop();
    if (in.arg) t.pop();  // the frame's lasti
    if (!exc.is_constant() || !PyExceptionInstance_Check(exc.obj)) throw Unsupported("re-raise of " + describe(exc));
    throw Raised::of(exc.obj);
  }
  static void is_op(Tracer& t, const Instruction& in) {
    SymValue b = t.pop();
    SymValue a = t.pop();
    t.push(Tracer::constant(same_object(t, a, b) != (in.arg == 1) ? Py_True : Py_False));
  }
  static bool str_keys(PyObject* dict) {
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &k, &v))
      if (!PyUnicode_CheckExact(k)) return false;
    return true;
  }
  static void contains_op(Tracer& t, const Instruction& in) {
    SymValue container = t.pop();
    SymValue item = t.pop();
    bool found = false;
    if (container.is_constant() && python_dunder(Py_TYPE(container.obj), "__contains__")) {
      // A Python __contains__ (a Mapping's: `key in registry`) is inlined, as eager runs it.
      SymValue r = t.call(Tracer::constant(python_dunder(Py_TYPE(container.obj), "__contains__")), {container, item}, {});
      found = t.truth(r, "'in'");
      t.push(Tracer::constant(found != (in.arg == 1) ? Py_True : Py_False));
      return;
    }
    if (container.kind == SymValue::Kind::Set) {
      PyOwned i(item.is_python_constant() ? t.materialize(item) : nullptr);
      if (!i.p || !compares_in_c(i.p)) throw Unsupported("'in' of a " + describe(item) + " in a set");
      const int r = PySet_Contains(container.obj, i.p);
      if (r < 0) { PyErr_Clear(); throw Unsupported("'in' raised"); }
      t.push(Tracer::constant((r == 1) != (in.arg == 1) ? Py_True : Py_False));
      return;
    }
    // A ModelOutput of the trace holds the keys of its fields that are not None.
    if (container.kind == SymValue::Kind::Record && is_model_output(container.obj) && item.is_constant() && PyUnicode_CheckExact(item.obj)) {
      for (size_t i = 0; i < container.field_names.size() && !found; ++i)
        found = container.field_names[i] == PyUnicode_AsUTF8(item.obj) &&
                !(container.items[i].is_constant() && container.items[i].obj == Py_None);
      t.push(Tracer::constant(found != (in.arg == 1) ? Py_True : Py_False));
      return;
    }
    if (container.kind == SymValue::Kind::Dict) {
      if (!item.is_constant()) throw Unsupported("'in' of a " + describe(item) + " in a dict");
      for (const SymValue& k : container.box->keys) {
        int eq = t.equal(k, item);
        if (eq < 0) { PyErr_Clear(); throw Unsupported("'in' raised"); }
        if (eq) { found = true; break; }
      }
    } else if (container.is_constant() && container.source && PyDict_Check(container.obj) && item.is_constant() &&
               PyUnicode_CheckExact(item.obj) && !python_dunder(Py_TYPE(container.obj), "__contains__") && str_keys(container.obj)) {
      // A dict subclass from outside the frame that keeps dict's lookup, with str keys (the
      // ModelOutput a caller hands on): its keys are guarded, not its identity.
      t.add_guard(container.source, GuardKind::DictKeys, container.obj);
      found = PyDict_Contains(container.obj, item.obj) == 1;
    } else if (container.is_python_constant() && item.is_python_constant()) {
      PyOwned c(t.materialize(container)), i(t.materialize(item));
      // Containment compares with ==: a Python __eq__ of the item or of any member is user code.
      // A set or dict also hashes the item.
      // (A tuple compares and hashes its items: a Python __eq__ or __hash__ of one is user code.)
      auto python_eq = [](PyObject* o) { return !compares_in_c(o); };
      auto python_hash = [](PyObject* o) {
        return PyTuple_Check(o) ? !holds_only_builtin_values(o) : python_dunder(Py_TYPE(o), "__hash__") != nullptr;
      };
      // A dict subclass that keeps dict's lookup (a ModelOutput) with str keys: a str is found by
      // hash and str equality only.
      const bool str_keyed = PyDict_Check(c.p) && PyUnicode_CheckExact(i.p) && !python_dunder(Py_TYPE(c.p), "__contains__") && str_keys(c.p);
      const bool hashed = PyAnySet_CheckExact(c.p) || PyDict_CheckExact(c.p) || PyDictKeys_Check(c.p) || str_keyed;
      bool user_eq = python_eq(i.p) || (hashed && python_hash(i.p)) ||
                     !(PyTuple_CheckExact(c.p) || PyList_CheckExact(c.p) || hashed || PyUnicode_CheckExact(c.p) || PyRange_Check(c.p));
      if (!user_eq && (PyTuple_CheckExact(c.p) || PyList_CheckExact(c.p))) user_eq = python_eq(c.p);  // its items
      if (user_eq) throw Unsupported("'in' on " + describe(container) + " runs a Python __eq__ or __contains__");
      int r = PySequence_Contains(c.p, i.p);
      if (r < 0) { PyErr_Clear(); throw Unsupported("'in' on " + describe(container) + " raised"); }
      found = r == 1;
    } else if ((container.kind == SymValue::Kind::Tuple || container.kind == SymValue::Kind::List) && item.is_constant()) {
      for (const SymValue& v : container.seq()) {
        if (!v.is_constant()) throw Unsupported("'in' on a sequence holding " + describe(v));
        int eq = t.equal(v, item);
        if (eq < 0) { PyErr_Clear(); throw Unsupported("'in' raised"); }
        if (eq) { found = true; break; }
      }
    } else {
      throw Unsupported("'in' on " + describe(container));
    }
    t.push(Tracer::constant(found != (in.arg == 1) ? Py_True : Py_False));
  }
  static void unary(Tracer& t, const char* op_name, PyObject* (*fold)(PyObject*)) {
    SymValue a = t.pop();
    if (a.is_constant() && (PyLong_Check(a.obj) || PyFloat_Check(a.obj) || PyComplex_Check(a.obj))) {
      PyObject* r = fold(a.obj);
      if (!r) { PyErr_Clear(); throw Unsupported(std::string(op_name) + " on " + describe(a) + " raised"); }
      PyOwned owned(r);
      t.push(Tracer::constant(r));
      return;
    }
    if (!a.is_tensor()) throw Unsupported(std::string(op_name) + " on " + describe(a));
    auto fam = family_of_name(op_name);
    if (!fam) throw Unsupported(std::string(op_name) + " is not in the op table");
    t.push(t.call_family(*fam, {a}, {}, op_name));
  }
  static void unary_negative(Tracer& t, const Instruction&) { unary(t, "operator.neg", PyNumber_Negative); }
  static void unary_positive(Tracer& t, const Instruction&) { unary(t, "operator.pos", PyNumber_Positive); }
  static void unary_invert(Tracer& t, const Instruction&) { unary(t, "operator.invert", PyNumber_Invert); }
  static void unary_not(Tracer& t, const Instruction&) {
    SymValue a = t.pop();
    t.push(Tracer::constant(t.truth(a, "'not'") ? Py_False : Py_True));
  }
  static void call_intrinsic_1(Tracer& t, const Instruction& in) {  // 3.12
    // 5 = INTRINSIC_UNARY_POSITIVE, 6 = INTRINSIC_LIST_TO_TUPLE
    if (in.arg == 5) return unary_positive(t, in);
    if (in.arg == 6) return list_to_tuple(t, in);
    throw Unsupported("CALL_INTRINSIC_1 " + std::to_string(in.arg));
  }

  // ---- subscripts
  static void binary_subscr(Tracer& t, const Instruction&) {
    SymValue index = t.pop();
    SymValue container = t.pop();
    t.push(t.subscript(container, index));
  }
  static void binary_slice(Tracer& t, const Instruction&) {  // 3.12: container, start, stop
    SymValue stop = t.pop();
    SymValue start = t.pop();
    SymValue container = t.pop();
    SymValue s;
    s.kind = SymValue::Kind::Slice;
    s.items = {start, stop, Tracer::constant(Py_None)};
    t.push(t.subscript(container, fold_slice(t, std::move(s))));
  }
  static SymValue fold_slice(Tracer& t, SymValue s) {
    if (!s.is_python_constant()) throw Unsupported("slice with a tensor bound");
    PyOwned obj(t.materialize(s));
    return Tracer::constant(obj.p);
  }
  static void build_slice(Tracer& t, const Instruction& in) {
    SymValue step = in.arg == 3 ? t.pop() : Tracer::constant(Py_None);
    SymValue stop = t.pop();
    SymValue start = t.pop();
    SymValue s;
    s.kind = SymValue::Kind::Slice;
    s.items = {start, stop, step};
    t.push(fold_slice(t, std::move(s)));
  }
  // Item assignment into a list or dict made in the trace. Tensors (x[i] = v) are in-place ops
  // on data the caller may see: not captured yet.
  static void store_subscr(Tracer& t, const Instruction&) {
    SymValue index = t.pop();
    SymValue container = t.pop();
    SymValue value = t.pop();
    store_item(t, container, index, std::move(value));
  }
  static void store_slice(Tracer& t, const Instruction&) {  // 3.12: value, container, start, stop
    SymValue stop = t.pop();
    SymValue start = t.pop();
    SymValue container = t.pop();
    SymValue value = t.pop();
    SymValue s;
    s.kind = SymValue::Kind::Slice;
    s.items = {start, stop, Tracer::constant(Py_None)};
    store_item(t, container, fold_slice(t, std::move(s)), std::move(value));
  }
  static void store_item(Tracer& t, SymValue& container, const SymValue& index, SymValue value) {
    // A container holding itself (x[0] = x) would make every later walk of the trace's values
    // (rebuilding, guards, templates) endless: left to Python.
    if (container.box && value.holds_box(container.box.get())) throw Unsupported("a container that holds itself");
    if (container.is_tensor()) {  // x[i] = v: an in-place write, recorded as eager does it
      auto fam = family_of_name("operator.setitem");
      if (!fam) throw Unsupported("tensor item assignment is not in the op table");
      t.record(*fam, {t.to_call_arg(container), t.index_arg(index), t.to_call_arg(value)}, {}, "Tensor.__setitem__");
      return;
    }
    if (container.kind == SymValue::Kind::Dict || container.kind == SymValue::Kind::List) t.check_not_iterating(container, "item assignment");
    if (container.kind == SymValue::Kind::Dict) return dict_set(t, container, index, std::move(value));
    if (container.kind == SymValue::Kind::List && index.is_constant() && PyLong_Check(index.obj)) {
      if (container.source) t.mutate_visible(container, "item assignment");
      auto& items = container.box->items;
      Py_ssize_t i = PyLong_AsSsize_t(index.obj);
      const Py_ssize_t n = static_cast<Py_ssize_t>(items.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) throw Unsupported("list assignment index out of range");
      items[static_cast<size_t>(i)] = std::move(value);
      return;
    }
    if (container.kind == SymValue::Kind::List && index.is_constant() && PySlice_Check(index.obj)) {
      if (container.source) t.mutate_visible(container, "slice assignment");
      auto& items = container.box->items;
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(index.obj, &start, &stop, &step) < 0 || step != 1) { PyErr_Clear(); throw Unsupported("extended slice assignment"); }
      PySlice_AdjustIndices(static_cast<Py_ssize_t>(items.size()), &start, &stop, step);
      if (stop < start) stop = start;
      SymValue it = t.make_iterator(value);
      std::vector<SymValue> repl(it.box->items.begin() + static_cast<long>(it.box->pos), it.box->items.end());
      items.erase(items.begin() + start, items.begin() + stop);
      items.insert(items.begin() + start, repl.begin(), repl.end());
      return;
    }
    throw Unsupported("item assignment to " + describe(container));
  }
  static void delete_subscr(Tracer& t, const Instruction&) {
    SymValue index = t.pop();
    SymValue container = t.pop();
    // A continuation's prologue empties the list its arguments came in: replayed after the graph.
    if (container.kind == SymValue::Kind::List && container.source && container.source->kind == Source::Kind::Local &&
        container.source->index == 0 && t.frames_.size() == 1 && is_resume_prologue(t.fr().code, t.fr().pc)) {
      TraceResult::SideEffect e;
      e.target = container;
      e.kind = TraceResult::SideEffect::Kind::ClearList;
      t.result_.effects.push_back(std::move(e));
      return;
    }
    if (!index.is_constant()) throw Unsupported("del on " + describe(container));
    if (container.kind == SymValue::Kind::List || container.kind == SymValue::Kind::Dict) t.check_not_iterating(container, "del");
    if (container.source && (container.kind == SymValue::Kind::List || container.kind == SymValue::Kind::Dict))
      t.mutate_visible(container, "del");
    else if (container.source) throw Unsupported("del on " + describe(container));
    if (container.kind == SymValue::Kind::List && PyLong_Check(index.obj)) {
      auto& items = container.box->items;
      Py_ssize_t i = PyLong_AsSsize_t(index.obj);
      if (i < 0) i += static_cast<Py_ssize_t>(items.size());
      if (i < 0 || i >= static_cast<Py_ssize_t>(items.size())) throw Unsupported("del index out of range");
      items.erase(items.begin() + i);
      return;
    }
    if (container.kind == SymValue::Kind::Dict) {
      for (size_t i = 0; i < container.box->keys.size(); ++i)
        if (t.equal(container.box->keys[i], index) == 1) {
          container.box->keys.erase(container.box->keys.begin() + static_cast<long>(i));
          container.box->items.erase(container.box->items.begin() + static_cast<long>(i));
          return;
        }
      PyErr_Clear();
      throw Unsupported("del of a missing key");
    }
    (void)t;
    throw Unsupported("del on " + describe(container));
  }
  static void dict_set(Tracer& t, SymValue& dict, const SymValue& key, SymValue value) {
    if (dict.source) t.mutate_visible(dict, "item assignment");
    if (!key.is_constant()) throw Unsupported("dict key " + describe(key) + " is not a constant");
    auto& keys = dict.box->keys;
    for (size_t i = 0; i < keys.size(); ++i) {
      int eq = t.equal(keys[i], key);
      if (eq < 0) { PyErr_Clear(); throw Unsupported("dict key comparison raised"); }
      if (eq) {
        dict.box->items[i] = std::move(value);
        return;
      }
    }
    keys.push_back(key);
    dict.box->items.push_back(std::move(value));
  }

  // ---- building
  static std::vector<SymValue> pop_n(Tracer& t, int n) {
    std::vector<SymValue> items(static_cast<size_t>(n));
    for (int i = n - 1; i >= 0; --i) items[static_cast<size_t>(i)] = t.pop();
    return items;
  }
  static void build_tuple(Tracer& t, const Instruction& in) { t.push(SymValue::tuple(pop_n(t, in.arg))); }
  static void build_list(Tracer& t, const Instruction& in) { t.push(SymValue::list(pop_n(t, in.arg))); }
  static void list_extend(Tracer& t, const Instruction& in) {
    SymValue seq = t.pop();
    SymValue& list = t.top(in.arg - 1);
    if (list.kind != SymValue::Kind::List) throw Unsupported("LIST_EXTEND on " + describe(list));
    list.source = nullptr;  // a display under construction: see list_append
    SymValue it = t.make_iterator(seq);
    for (size_t i = it.box->pos; i < it.box->items.size(); ++i) list.box->items.push_back(it.box->items[i]);
  }
  static void list_append(Tracer& t, const Instruction& in) {
    SymValue v = t.pop();
    SymValue& list = t.top(in.arg - 1);
    // The list is a display (or comprehension) under construction, which no other reference can
    // see. One with a source is a continuation's stack item, received half built (its first
    // items came before the break): it becomes a list of the trace, rebuilt with every item, so
    // that the appends are not lost (the half-built object goes unobserved).
    if (list.kind != SymValue::Kind::List) throw Unsupported("LIST_APPEND on " + describe(list));
    list.source = nullptr;
    list.box->items.push_back(std::move(v));
  }
  static void list_to_tuple(Tracer& t, const Instruction&) {
    SymValue v = t.pop();
    if (v.kind != SymValue::Kind::List) throw Unsupported("LIST_TO_TUPLE on " + describe(v));
    t.push(SymValue::tuple(v.box->items));
  }
  static void unpack_sequence(Tracer& t, const Instruction& in) {
    std::vector<SymValue> items = t.unpack(t.pop(), in.arg);
    for (auto it = items.rbegin(); it != items.rend(); ++it) t.push(std::move(*it));
  }
  // a, *rest = seq (and *rest, z = ..., a, *mid, z = ...): `before` items, a new list of the middle,
  // `after` items, pushed right to left like UNPACK_SEQUENCE. Too few items: eager's ValueError.
  static void unpack_ex(Tracer& t, const Instruction& in) {
    const size_t before = static_cast<size_t>(in.arg & 0xff), after = static_cast<size_t>(in.arg >> 8);
    std::vector<SymValue> items = remaining(t.make_iterator(t.pop()));
    if (items.size() < before + after)
      throw Unsupported("unpacking " + std::to_string(items.size()) + " values into at least " + std::to_string(before + after));
    std::vector<SymValue> out(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(before));
    out.push_back(SymValue::list(std::vector<SymValue>(items.begin() + static_cast<std::ptrdiff_t>(before),
                                                       items.end() - static_cast<std::ptrdiff_t>(after))));
    out.insert(out.end(), items.end() - static_cast<std::ptrdiff_t>(after), items.end());
    for (auto it = out.rbegin(); it != out.rend(); ++it) t.push(std::move(*it));
  }
  static void build_map(Tracer& t, const Instruction& in) {
    std::vector<SymValue> kv = pop_n(t, 2 * in.arg);
    SymValue d = SymValue::boxed(SymValue::Kind::Dict);
    for (int i = 0; i < in.arg; ++i) dict_set(t, d, kv[2 * i], kv[2 * i + 1]);
    t.push(std::move(d));
  }
  static void build_const_key_map(Tracer& t, const Instruction& in) {
    SymValue keys = t.pop();
    std::vector<SymValue> values = pop_n(t, in.arg);
    if (!keys.is_constant() || !PyTuple_Check(keys.obj)) throw Unsupported("BUILD_CONST_KEY_MAP keys");
    SymValue d = SymValue::boxed(SymValue::Kind::Dict);
    for (int i = 0; i < in.arg; ++i) dict_set(t, d, Tracer::constant(PyTuple_GET_ITEM(keys.obj, i)), values[static_cast<size_t>(i)]);
    t.push(std::move(d));
  }
  static void map_add(Tracer& t, const Instruction& in) {
    SymValue value = t.pop();
    SymValue key = t.pop();
    SymValue& d = t.top(in.arg - 1);
    if (d.kind != SymValue::Kind::Dict) throw Unsupported("MAP_ADD on " + describe(d));
    dict_set(t, d, key, std::move(value));
  }
  static void dict_update(Tracer& t, const Instruction& in) {  // DICT_UPDATE and DICT_MERGE
    SymValue other = t.pop();
    SymValue& d = t.top(in.arg - 1);
    if (d.kind != SymValue::Kind::Dict) throw Unsupported("dict update of " + describe(d));
    if (other.kind == SymValue::Kind::Dict) {
      for (size_t i = 0; i < other.box->keys.size(); ++i) dict_set(t, d, other.box->keys[i], other.box->items[i]);
      return;
    }
    if (other.is_constant() && PyDict_Check(other.obj)) {
      PyObject *k, *v;
      Py_ssize_t pos = 0;
      while (PyDict_Next(other.obj, &pos, &k, &v)) {
        if (other.source) throw Unsupported("** of a dict the caller can see");
        dict_set(t, d, Tracer::constant(k), Tracer::constant(v));
      }
      return;
    }
    throw Unsupported("dict update with " + describe(other));
  }
  static void format_value(Tracer& t, const Instruction& in) {
    SymValue spec = (in.arg & 0x04) ? t.pop() : Tracer::constant(Py_None);
    SymValue v = t.pop();
    if (!v.is_python_constant()) throw Unsupported("formatting " + describe(v));
    PyOwned obj(t.materialize(v));
    PyObject* conv = obj.p;
    PyOwned converted(nullptr);
    switch (in.arg & 0x03) {
      case 1: converted.p = PyObject_Str(conv); conv = converted.p; break;
      case 2: converted.p = PyObject_Repr(conv); conv = converted.p; break;
      case 3: converted.p = PyObject_ASCII(conv); conv = converted.p; break;
      default: break;
    }
    if (!conv) { PyErr_Clear(); throw Unsupported("formatting raised"); }
    PyOwned r(PyObject_Format(conv, spec.obj == Py_None ? nullptr : spec.obj));
    if (!r.p) { PyErr_Clear(); throw Unsupported("formatting raised"); }
    t.push(Tracer::constant(r.p));
  }
  static void build_string(Tracer& t, const Instruction& in) {
    std::vector<SymValue> parts = pop_n(t, in.arg);
    PyOwned tuple(PyTuple_New(in.arg));
    for (int i = 0; i < in.arg; ++i) {
      const SymValue& p = parts[static_cast<size_t>(i)];
      if (!p.is_constant() || !PyUnicode_Check(p.obj)) throw Unsupported("building a string from " + describe(p));
      PyTuple_SET_ITEM(tuple.p, i, Py_NewRef(p.obj));
    }
    PyOwned empty(PyUnicode_FromString(""));
    PyOwned r(PyUnicode_Join(empty.p, tuple.p));
    t.push(Tracer::constant(r.p));
  }

  // Sets of constants: a Set of the trace around a real set filled at trace time (values.h).
  static void build_set(Tracer& t, const Instruction& in) {
    std::vector<SymValue> items = pop_n(t, in.arg);
    PyOwned set(PySet_New(nullptr));
    for (const SymValue& v : items) {
      if (!v.is_python_constant()) throw Unsupported("a set of " + describe(v));
      PyOwned o(t.materialize(v));
      if (!compares_in_c(o.p)) throw Unsupported("a set of " + describe(v) + " (its hash or == is Python code)");
      if (PySet_Add(set.p, o.p) < 0) { PyErr_Clear(); throw Unsupported("unhashable set item"); }
    }
    t.push(set_value(set.p));
  }
  static void set_add(Tracer& t, const Instruction& in) {  // SET_ADD and SET_UPDATE
    SymValue v = t.pop();
    SymValue& set = t.top(in.arg - 1);
    if (set.kind != SymValue::Kind::Set || !v.is_python_constant()) throw Unsupported("adding " + describe(v) + " to a set");
    PyOwned o(t.materialize(v));
    if (!compares_in_c(o.p)) throw Unsupported("adding " + describe(v) + " to a set (its hash or == is Python code)");
    const bool update = std::strcmp(opcode_info(in.opcode).name, "SET_UPDATE") == 0;
    const int rc = update ? _PySet_Update(set.obj, o.p) : PySet_Add(set.obj, o.p);
    if (rc < 0) { PyErr_Clear(); throw Unsupported("set update raised"); }
  }

  // ---- control flow
  static void jump_to(Tracer& t, int units) {
    FrameState& f = t.fr();
    if (units < 0 || units >= static_cast<int>(f.inst_at.size()) || f.inst_at[static_cast<size_t>(units)] < 0)
      throw InternalError("jump to a code unit that starts no instruction");
    f.next_pc = static_cast<size_t>(f.inst_at[static_cast<size_t>(units)]);
  }
  static void jump(Tracer& t, const Instruction& in) { jump_to(t, jump_target(in)); }
  // POP_JUMP_IF_* of both versions. Which test and when to jump come from the name.
  static void pop_jump(Tracer& t, const Instruction& in) {
    const char* name = opcode_info(in.opcode).name;
    SymValue v = t.pop();
    bool cond;
    if (std::strstr(name, "NOT_NONE")) cond = !(v.is_constant() && v.obj == Py_None);
    else if (std::strstr(name, "NONE")) cond = v.is_constant() && v.obj == Py_None;
    else if (std::strstr(name, "FALSE")) cond = !t.truth(v, "a branch");
    else cond = t.truth(v, "a branch");
    if (cond) jump(t, in);
  }
  static void jump_or_pop(Tracer& t, const Instruction& in) {  // 3.11 JUMP_IF_{TRUE,FALSE}_OR_POP
    const bool when = std::strstr(opcode_info(in.opcode).name, "TRUE") != nullptr;
    if (t.truth(t.top(), "a branch") == when) jump(t, in);
    else t.pop();
  }
  static void get_iter(Tracer& t, const Instruction&) { t.push(t.make_iterator(t.pop())); }
  static void for_iter(Tracer& t, const Instruction& in) {
    SymValue& it = t.top();
    if (it.kind != SymValue::Kind::Iterator) throw Unsupported("iteration over " + describe(it));
    if (it.box->pos < it.box->items.size()) {
      SymValue next = it.box->items[it.box->pos++];
      t.push(std::move(next));
      return;
    }
    it.box->exhausted = true;
    t.pop();
    const int end = jump_target(in);
    jump_to(t, end);
    if (python_minor() >= 12) t.fr().next_pc += 1;  // 3.12 skips the END_FOR at the target
  }

  // ---- with blocks: torch.no_grad(), enable_grad(), set_grad_enabled(b), autocast, nullcontext
  static void before_with(Tracer& t, const Instruction&) { t.enter_with(t.pop()); }

  // ---- functions
  static void make_function(Tracer& t, const Instruction& in) {
    SymValue code = t.pop();
    if (!code.is_constant() || !PyCode_Check(code.obj)) throw Unsupported("MAKE_FUNCTION without a code object");
    SymValue fn = SymValue::boxed(SymValue::Kind::Function);
    fn.obj = Py_NewRef(code.obj);
    fn.box->globals = Tracer::constant(t.fr().globals);
    if (in.arg & 0x08) {
      SymValue cells = t.pop();
      if (cells.kind != SymValue::Kind::Tuple) throw Unsupported("closure of " + describe(cells));
      fn.box->closure = cells.items;
    }
    if (in.arg & 0x04) fn.box->annotations = t.pop();
    if (in.arg & 0x02) {
      SymValue kw = t.pop();
      if (kw.kind == SymValue::Kind::Dict) {
        for (size_t i = 0; i < kw.box->keys.size(); ++i) {
          fn.box->keys.push_back(kw.box->keys[i]);
          fn.field_names.push_back(PyUnicode_AsUTF8(kw.box->keys[i].obj));
        }
        fn.items = kw.box->items;  // keyword-only defaults, parallel with field_names
      } else {
        throw Unsupported("keyword defaults of " + describe(kw));
      }
    }
    if (in.arg & 0x01) {
      SymValue defaults = t.pop();
      if (defaults.kind == SymValue::Kind::Tuple) fn.box->items = defaults.items;
      else if (defaults.is_constant() && PyTuple_Check(defaults.obj)) fn.box->items = t.unpack(defaults, static_cast<int>(PyTuple_GET_SIZE(defaults.obj)));
      else throw Unsupported("defaults of " + describe(defaults));
    }
    t.push(std::move(fn));
  }

  // ---- calls
  static void kw_names(Tracer& t, const Instruction& in) {
    t.fr().kw_names = PyTuple_GET_ITEM(t.fr().code->co_consts, in.arg);
  }
  // isinstance(v, T) or type(v) of a number or string the continuation has not read: its type
  // decides, not its value (a `t0 = time.perf_counter()` crossing the break): a type guard.
  static void type_only_call(Tracer& t, const Instruction& in) {
    auto& st = t.fr().stack;
    const size_t n = static_cast<size_t>(in.arg);
    if (t.fr().kw_names || st.size() < n + 2) return;
    const SymValue& callable = st[st.size() - n - 1];
    if (!st[st.size() - n - 2].is_null() || callable.kind != SymValue::Kind::Constant) return;
    static PyObject* const isinstance = builtin("isinstance");
    static PyObject* const type = builtin("type");
    if (!((callable.obj == isinstance && n == 2) || (callable.obj == type && n == 1))) return;
    SymValue& v = st[st.size() - n];
    if (v.kind != SymValue::Kind::Unread || !plain_scalar(v.obj)) return;
    t.add_guard(v.source, GuardKind::TypeIs, v.obj);
    v.kind = SymValue::Kind::Constant;  // read for its type only: no guard on the value
  }
  static void call(Tracer& t, const Instruction& in) {
    type_only_call(t, in);
    std::vector<SymValue> args = pop_n(t, in.arg);
    SymValue callable = t.pop();
    SymValue head = t.pop();
    if (!head.is_null()) {  // method form: head is the callable, then self
      args.insert(args.begin(), std::move(callable));
      callable = std::move(head);
    }
    std::vector<std::pair<std::string, SymValue>> kwargs;
    if (PyObject* kw = t.fr().kw_names) {
      const Py_ssize_t nk = PyTuple_GET_SIZE(kw);
      const size_t first_kw = args.size() - static_cast<size_t>(nk);
      for (Py_ssize_t k = 0; k < nk; ++k)
        kwargs.emplace_back(PyUnicode_AsUTF8(PyTuple_GET_ITEM(kw, k)), std::move(args[first_kw + static_cast<size_t>(k)]));
      args.resize(first_kw);
      t.fr().kw_names = nullptr;
    }
    t.push(t.call(callable, std::move(args), std::move(kwargs)));
  }
  static void call_function_ex(Tracer& t, const Instruction& in) {
    SymValue kw = (in.arg & 1) ? t.pop() : SymValue();
    SymValue star = t.pop();
    SymValue callable = t.pop();
    SymValue head = t.pop();  // NULL in 3.11/3.12
    if (!head.is_null()) throw Unsupported("CALL_FUNCTION_EX with a method");
    SymValue it = t.make_iterator(star);
    std::vector<SymValue> args(it.box->items.begin() + static_cast<long>(it.box->pos), it.box->items.end());
    std::vector<std::pair<std::string, SymValue>> kwargs;
    if (in.arg & 1) {
      if (kw.kind == SymValue::Kind::Dict) {
        for (size_t i = 0; i < kw.box->keys.size(); ++i) {
          const SymValue& k = kw.box->keys[i];
          if (!PyUnicode_Check(k.obj)) throw Unsupported("**kwargs with a non-string key");
          kwargs.emplace_back(PyUnicode_AsUTF8(k.obj), kw.box->items[i]);
        }
      } else if (kw.is_constant() && PyDict_Check(kw.obj)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kw.obj, &pos, &k, &v)) {
          if (!PyUnicode_Check(k)) throw Unsupported("**kwargs with a non-string key");
          kwargs.emplace_back(PyUnicode_AsUTF8(k), Tracer::constant(v));
        }
      } else {
        throw Unsupported("**kwargs of " + describe(kw));
      }
    }
    t.push(t.call(callable, std::move(args), std::move(kwargs)));
  }

  // ---- attribute writes: fields of records made in the trace, or side effects replayed after
  // the graph on objects with the default __setattr__.
  static void store_attr(Tracer& t, const Instruction& in) {
    SymValue owner = t.pop();
    SymValue value = t.pop();
    t.store_attr(owner, str_name(t, in.arg), value);
  }
  static void delete_attr(Tracer& t, const Instruction& in) { t.delete_attr(t.pop(), str_name(t, in.arg)); }

  // ---- imports of modules already imported (a sys.modules lookup, as Python does first)
  static void import_name(Tracer& t, const Instruction& in) {
    SymValue fromlist = t.pop();
    SymValue level = t.pop();
    if (!level.is_constant() || !PyLong_Check(level.obj) || PyLong_AsLong(level.obj) != 0)
      throw Unsupported("relative import");
    const std::string name = str_name(t, in.arg);
    PyObject* modules = PyImport_GetModuleDict();
    PyObject* mod = PyDict_GetItemString(modules, name.c_str());
    if (!mod) throw Unsupported("import of '" + name + "', not imported yet");
    const bool from = fromlist.is_constant() && fromlist.obj != Py_None && PyObject_IsTrue(fromlist.obj) == 1;
    if (!from) mod = PyDict_GetItemString(modules, name.substr(0, name.find('.')).c_str());
    if (!mod) throw Unsupported("import of '" + name + "'");
    t.push(Tracer::constant(mod));
  }
  static void import_from(Tracer& t, const Instruction& in) {
    SymValue mod = t.top();
    if (!mod.is_constant()) throw Unsupported("from-import of " + describe(mod));
    PyOwned v(PyObject_GetAttrString(mod.obj, str_name(t, in.arg).c_str()));
    if (!v.p) { PyErr_Clear(); throw Unsupported("from-import of '" + str_name(t, in.arg) + "'"); }
    t.push(Tracer::constant(v.p));
  }

  // ---- generators inlined by calls.cpp run to completion, collecting what they yield
  static void return_generator(Tracer& t, const Instruction&) {
    if (!t.fr().generator) throw Unsupported("a generator frame");
    t.push(Tracer::constant(Py_None));  // what the first resume would send
  }
  static void yield_value(Tracer& t, const Instruction&) {
    if (!t.fr().generator) throw Unsupported("yield outside an inlined generator");
    t.fr().yields.push_back(t.pop());
    t.push(Tracer::constant(Py_None));  // next() sends None
  }

  // ---- returns
  static void return_value(Tracer& t, const Instruction&) {
    FrameState& f = t.fr();
    f.return_value = t.pop();
    f.done = true;
  }

  static const std::array<Fn, 256>& table() {
    static const std::array<Fn, 256> tbl = [] {
      std::array<Fn, 256> a{};
      const std::pair<const char*, Fn> by_name[] = {
          {"NOP", nop}, {"RESUME", nop}, {"PRECALL", nop}, {"COPY_FREE_VARS", nop},
          {"EXTENDED_ARG", nop}, {"MAKE_CELL", make_cell}, {"LOAD_CLOSURE", load_closure},
          {"LOAD_DEREF", load_deref}, {"STORE_DEREF", store_deref}, {"DELETE_DEREF", delete_deref},
          {"LOAD_FAST", load_fast}, {"LOAD_FAST_CHECK", load_fast},
          {"LOAD_FAST_AND_CLEAR", load_fast_and_clear}, {"STORE_FAST", store_fast},
          {"DELETE_FAST", delete_fast}, {"LOAD_CONST", load_const}, {"RETURN_CONST", return_const},
          {"LOAD_GLOBAL", load_global}, {"STORE_GLOBAL", store_global}, {"LOAD_ATTR", load_attr}, {"LOAD_METHOD", load_method},
          {"LOAD_SUPER_ATTR", load_super_attr}, {"POP_TOP", pop_top}, {"PUSH_NULL", push_null},
          {"COPY", copy}, {"SWAP", swap}, {"END_FOR", end_for}, {"BINARY_OP", binary_op},
          {"COMPARE_OP", compare_op}, {"IS_OP", is_op}, {"RAISE_VARARGS", raise_varargs},
          {"PUSH_EXC_INFO", push_exc_info}, {"CHECK_EXC_MATCH", check_exc_match}, {"POP_EXCEPT", pop_except},
          {"RERAISE", reraise}, {"CONTAINS_OP", contains_op},
          {"UNARY_NEGATIVE", unary_negative}, {"UNARY_POSITIVE", unary_positive},
          {"UNARY_INVERT", unary_invert}, {"UNARY_NOT", unary_not},
          {"CALL_INTRINSIC_1", call_intrinsic_1}, {"BINARY_SUBSCR", binary_subscr},
          {"BINARY_SLICE", binary_slice}, {"BUILD_SLICE", build_slice}, {"STORE_SUBSCR", store_subscr}, {"STORE_SLICE", store_slice}, {"DELETE_SUBSCR", delete_subscr},
          {"BUILD_TUPLE", build_tuple}, {"BUILD_LIST", build_list}, {"LIST_EXTEND", list_extend},
          {"LIST_APPEND", list_append}, {"LIST_TO_TUPLE", list_to_tuple},
          {"UNPACK_SEQUENCE", unpack_sequence}, {"UNPACK_EX", unpack_ex}, {"BUILD_MAP", build_map},
          {"BUILD_CONST_KEY_MAP", build_const_key_map}, {"MAP_ADD", map_add},
          {"DICT_UPDATE", dict_update}, {"DICT_MERGE", dict_update}, {"FORMAT_VALUE", format_value},
          {"BUILD_STRING", build_string}, {"JUMP_FORWARD", jump}, {"JUMP_BACKWARD", jump},
          {"JUMP_BACKWARD_NO_INTERRUPT", jump}, {"POP_JUMP_IF_FALSE", pop_jump},
          {"POP_JUMP_IF_TRUE", pop_jump}, {"POP_JUMP_IF_NONE", pop_jump},
          {"POP_JUMP_IF_NOT_NONE", pop_jump}, {"POP_JUMP_FORWARD_IF_FALSE", pop_jump},
          {"POP_JUMP_FORWARD_IF_TRUE", pop_jump}, {"POP_JUMP_FORWARD_IF_NONE", pop_jump},
          {"POP_JUMP_FORWARD_IF_NOT_NONE", pop_jump}, {"POP_JUMP_BACKWARD_IF_FALSE", pop_jump},
          {"POP_JUMP_BACKWARD_IF_TRUE", pop_jump}, {"POP_JUMP_BACKWARD_IF_NONE", pop_jump},
          {"POP_JUMP_BACKWARD_IF_NOT_NONE", pop_jump}, {"JUMP_IF_FALSE_OR_POP", jump_or_pop},
          {"JUMP_IF_TRUE_OR_POP", jump_or_pop}, {"GET_ITER", get_iter}, {"FOR_ITER", for_iter},
          {"BEFORE_WITH", before_with}, {"MAKE_FUNCTION", make_function},
          {"KW_NAMES", kw_names}, {"CALL", call}, {"CALL_FUNCTION_EX", call_function_ex},
          {"RETURN_VALUE", return_value}, {"IMPORT_NAME", import_name}, {"IMPORT_FROM", import_from},
          {"RETURN_GENERATOR", return_generator}, {"YIELD_VALUE", yield_value}, {"STORE_ATTR", store_attr}, {"DELETE_ATTR", delete_attr}, {"BUILD_SET", build_set}, {"SET_ADD", set_add}, {"SET_UPDATE", set_add},
      };
      for (int op = 0; op < 256; ++op) {
        const char* name = opcode_info(static_cast<uint8_t>(op)).name;
        if (!name) continue;
        for (const auto& [n, fn] : by_name)
          if (std::strcmp(n, name) == 0) a[op] = fn;
      }
      return a;
    }();
    return tbl;
  }
};

void index_instructions(FrameState& f) {
  int units = f.insts.empty() ? 0 : f.insts.back().next;
  f.inst_at.assign(static_cast<size_t>(units) + 1, -1);
  for (size_t i = 0; i < f.insts.size(); ++i) {
    f.inst_at[static_cast<size_t>(f.insts[i].start)] = static_cast<int>(i);
    f.inst_at[static_cast<size_t>(f.insts[i].index)] = static_cast<int>(i);
  }
}

// The report's source lines: nodes this instruction recorded that an inlined call's own
// instructions did not already claim get this frame's line.
void Tracer::stamp_locations(const FrameState& f, int line, size_t first_node) {
  std::vector<codegen::Node>& nodes = result_.graph.nodes;
  int32_t loc = -1;
  for (size_t i = first_node; i < nodes.size(); ++i) {
    if (nodes[i].loc >= 0) continue;
    if (loc < 0) {
      const char* file = PyUnicode_AsUTF8(f.code->co_filename);
      loc = codegen::intern_location(file ? file : "?", line);
    }
    nodes[i].loc = loc;
  }
}

void Tracer::run_frame() {
  const auto& table = Handlers::table();
  const size_t index = frames_.size() - 1;
  FrameState& f = fr();
  if (f.inst_at.empty()) index_instructions(f);
  if (f.depth > kMaxInlineDepth) throw Unsupported("inlining deeper than " + std::to_string(kMaxInlineDepth) + " calls");
  static thread_local int executed = 0;
  if (frames_.size() == 1) executed = 0;
  while (!f.done) {
    if (f.pc >= f.insts.size()) throw Unsupported("the code ran off its end");
    if (f.depth == 0 && static_cast<int>(f.pc) == stop_at_) {
      result_.stopped = true;
      return;
    }
    if (++executed > kMaxInstructionsWithoutTensorOps && result_.graph.nodes.empty())
      throw Unsupported("no tensor operation in the first " + std::to_string(kMaxInstructionsWithoutTensorOps) + " instructions");
    if (executed > kMaxInstructions) throw Unsupported("the trace is longer than " + std::to_string(kMaxInstructions) + " instructions (a long loop?)");
    const Instruction& in = f.insts[f.pc];
    if (f.depth == 0 && !in_handler() && !entering_handler_) {
      result_.lineno = in.line;
      result_.break_inst = static_cast<int>(f.pc);
    }
    entering_handler_ = false;
    Handlers::Fn fn = table[in.opcode];
    if (!fn) throw Unsupported(std::string("opcode ") + opcode_info(in.opcode).name + " is not supported");
    f.next_pc = f.pc + 1;
    const size_t nodes_before = result_.graph.nodes.size();
    try {
      fn(*this, in);
    } catch (const Raised& r) {
      if (!handle_raised(r, index)) throw;
    }
    if (runtime::journal::on()) stamp_locations(f, in.line, nodes_before);
    f.pc = f.next_pc;
  }
}

namespace {

// Size-derived ints that outlive the trace (returned, stored by a side effect, held by an object
// made in the trace) reach Python as numbers: their sizes are specialised. On the stack and in
// the locals at a break, or in the lists and tuples there, one linear in the sizes is not
// (`rebuilt`): the transformed code computes it from its tensors' sizes (continuation.cpp).
void read_every_size(const SymValue& v, std::set<const SymBox*>& seen, bool rebuilt = false) {
  if (!(rebuilt && v.kind == SymValue::Kind::Constant && v.size && v.size->linear())) size_read(v);
  const bool sequence = v.kind == SymValue::Kind::Tuple || v.kind == SymValue::Kind::List;
  for (const SymValue& i : v.items) read_every_size(i, seen, rebuilt && sequence);
  if (v.box && seen.insert(v.box.get()).second) {
    for (const SymValue& i : v.box->items) read_every_size(i, seen, rebuilt && sequence);
    for (const SymValue& k : v.box->keys) read_every_size(k, seen);
    for (const SymValue& c : v.box->closure) read_every_size(c, seen);
  }
}

}  // namespace

std::string Tracer::where() const {
  if (frames_.empty()) return "?";
  const FrameState& f = *frames_.back();
  const char* file = PyUnicode_AsUTF8(f.code->co_filename);
  std::string name = file ? file : "?";
  const size_t slash = name.rfind('/');
  if (slash != std::string::npos) name = name.substr(slash + 1);
  const int line = f.pc < f.insts.size() ? f.insts[f.pc].line : -1;
  return name + ":" + std::to_string(line);
}

void Tracer::run() {
  // While this trace runs on this thread, reading a size-derived int specialises its sizes.
  struct HookScope {
    SizeReadHook saved;
    explicit HookScope(Tracer* t) : saved(size_read_hook()) {
      size_read_hook() = SizeReadHook{[](void* ctx, const codegen::shapes::SizeExpr& e) {
                                        Tracer* tr = static_cast<Tracer*>(ctx);
                                        for (codegen::shapes::SymbolId s : e.symbols())
                                          codegen::shapes::pin(tr->result_.graph, s, tr->where() + ": Python code uses it as a number");
                                      },
                                      t};
    }
    ~HookScope() { size_read_hook() = saved; }
  } hook(this);
  entry_grad_ = ctx_.grad_enabled;
  run_frame();
  if (ctx_.grad_enabled != entry_grad_) result_.grad_mode_after = ctx_.grad_enabled;
  FrameState& root = *frames_.front();
  // A continuation's argument never read: handed on from where it was (its source), unguarded.
  auto as_sourced = [](SymValue& v) {
    if (v.kind == SymValue::Kind::Unread) v.kind = SymValue::Kind::Constant;
  };
  if (result_.stopped) {
    result_.stack = root.stack;
    result_.locals = root.locals;
    for (auto& l : result_.locals)
      if (l) as_sourced(*l);
    for (SymValue& v : result_.stack) as_sourced(v);
    // Arguments the trace never read are still the caller's: reload them from their slots.
    for (int i = 0; i < nargs_; ++i) {
      if (result_.locals[static_cast<size_t>(i)] || root.written[static_cast<size_t>(i)] || !frame_.localsplus[i]) continue;
      auto src = std::make_shared<Source>();
      src->kind = Source::Kind::Local;
      src->index = i;
      src->name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(frame_.code->co_localsplusnames, i));
      result_.locals[static_cast<size_t>(i)] = SymValue::constant(frame_.localsplus[i], src);
    }
  } else {
    result_.return_value = root.return_value;
  }
  // A module made in the frame (calls.cpp) is a new object per call in eager: handed to Python
  // (returned, live at a break, stored somewhere), the compiled code's one object would show.
  if (!made_modules_.empty()) {
    bool escapes = holds_made_module(result_.return_value);
    for (const SymValue& v : result_.stack) escapes = escapes || holds_made_module(v);
    for (const auto& l : result_.locals) escapes = escapes || (l && holds_made_module(*l));
    for (const auto& e : result_.effects) escapes = escapes || holds_made_module(e.target) || holds_made_module(e.value);
    if (escapes) throw NoBreak("an nn.Module made in the frame outlives it (eager makes one per call)");
  }
  std::set<const SymBox*> seen;
  read_every_size(result_.return_value, seen);
  for (const SymValue& v : result_.stack) read_every_size(v, seen, true);
  for (const auto& l : result_.locals)
    if (l) read_every_size(*l, seen, true);
  for (const auto& e : result_.effects) {
    read_every_size(e.target, seen);
    read_every_size(e.value, seen);
  }
  finish_grad_stamps();
}

void Tracer::set_grad_mode(bool mode) {
  if (mode == ctx_.grad_enabled) return;
  finish_grad_stamps();
  ctx_.grad_enabled = mode;
}

void Tracer::finish_grad_stamps() {
  std::vector<codegen::Node>& nodes = result_.graph.nodes;
  const int8_t mode = ctx_.grad_enabled == entry_grad_ ? int8_t{-1} : int8_t{ctx_.grad_enabled};
  for (; grad_stamped_ < nodes.size(); ++grad_stamped_) nodes[grad_stamped_].grad_mode = mode;
}

// Inline a call into a new frame: used by calls.cpp.
SymValue inline_frame(Tracer& t, std::unique_ptr<FrameState> f);

}  // namespace fastdyn::symbolic
