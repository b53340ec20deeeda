// symbolic/tracer.h — internal state of one trace, shared by the files of the interpreter:
// interpreter.cpp (the instruction loop and the opcode handlers), calls.cpp (calls: ops, Python
// functions inlined, attribute reads), builtins.cpp (builtins on symbolic values; calls.h is the
// helper struct both share), break_points.cpp (where the root frame may break, and the retrace up
// to the break) and conversions.cpp (Python objects <-> symbolic values <-> op arguments). Not part of symbolic/'s interface: include interpreter.h instead.
//
// A trace is a stack of FrameStates: the root frame (the one the hook caught) and the Python
// functions it inlines. Unsupported code throws Unsupported; where it is thrown inside an
// inlined call, the root frame breaks at the instruction that made the call.
#pragma once
#include <Python.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/capture/capture.h"
#include "symbolic/bytecode.h"
#include "symbolic/interpreter.h"

namespace at {
class Tensor;
}

namespace fastdyn::symbolic {

// Thrown inside the trace to stop it: unsupported code, never a bug.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Unsupported where a graph break would be observable too (locals(), sys._getframe() would see
// the transformed code's frame): the whole frame runs as written.
struct NoBreak : Unsupported {
  using Unsupported::Unsupported;
};
// A `raise` of a builtin exception (RAISE_VARARGS), or a KeyError of a dict the trace knows:
// caught by a try/except of a traced frame (Tracer::handle_raised), or where the trace itself
// stands for the handler (a Sequence's __iter__ ending at its IndexError: objects.cpp); anywhere
// else Unsupported. `type` is the builtin exception class (immortal); `value` the exception
// instance, made for real from constants (an owned reference; null where there is none).
struct Raised : Unsupported {
  Raised(PyObject* t, const std::string& what, PyObject* v = nullptr)
      : Unsupported(what), type(t), value(v, [](PyObject* o) { Py_XDECREF(o); }) {}
  // The exception object `exc` (an instance) raised again (a bare `raise`, RERAISE).
  static Raised of(PyObject* exc) {
    return Raised(reinterpret_cast<PyObject*>(Py_TYPE(exc)), std::string("raise ") + Py_TYPE(exc)->tp_name, Py_NewRef(exc));
  }
  // Eager's AttributeError for `name` on an instance of the type named `type_name`.
  static Raised no_attribute(const char* type_name, const std::string& name) {
    const std::string what = std::string("'") + type_name + "' object has no attribute '" + name + "'";
    PyObject* error = PyObject_CallFunction(PyExc_AttributeError, "s", what.c_str());
    if (!error) PyErr_Clear();
    return Raised(PyExc_AttributeError, "AttributeError: " + what, error);
  }
  PyObject* type;
  std::shared_ptr<PyObject> value;
};

// What type(o).<dunder> resolves to when that is Python code (a function, or anything but a C
// slot, method or builtin), else nullptr (borrowed). The trace never calls such code for real:
// it inlines it, or breaks, so that user code runs exactly as often as eager runs it.
PyObject* python_dunder(PyTypeObject* tp, const char* dunder);
// `int | None` (types.UnionType) or `list[int]` (types.GenericAlias): immutable, with C lookups
// that run no Python code (attributes.cpp).
bool typing_form(PyObject* o);
// Whether `o == other` runs no Python code of o's: its type's __eq__ is C, and so is that of every
// item of a list, tuple, set or dict (keys and values) it holds, to a bounded depth (comparing
// [(1, obj)] with [(obj, 1)] runs obj.__eq__).
bool compares_in_c(PyObject* o, int depth = 0);

// One Python frame being traced: the root or an inlined callee.
struct FrameState {
  PyCodeObject* code = nullptr;      // borrowed (the function or the root frame holds it)
  std::vector<Instruction> insts;
  std::vector<int> inst_at;          // code-unit index -> instruction index (-1 inside one)
  std::vector<SymValue> stack;
  std::vector<std::optional<SymValue>> locals;  // by localsplus index
  std::vector<bool> written;         // root: argument slots stored to or deleted by the code
  PyObject* globals = nullptr;       // borrowed
  SourcePtr globals_source;          // null: the root frame's globals (Global sources)
  PyObject* kw_names = nullptr;      // borrowed from co_consts, pending for the next CALL
  size_t pc = 0;                     // index into insts of the instruction being executed
  size_t next_pc = 0;                // set by jumps; else pc + 1
  // Tracer::inside_try_except's answer for this frame at instruction try_pc (an outer frame asks
  // once per instruction, not once per op its callees record).
  mutable size_t try_pc = SIZE_MAX;
  mutable bool try_at_pc = false;
  bool done = false;
  SymValue return_value;
  int depth = 0;                     // 0 for the root
  bool generator = false;            // an inlined generator: runs to its end, collecting yields
  std::vector<SymValue> yields;
};

class Tracer {
 public:
  Tracer(const FrameInputs& frame, TraceResult& result, int stop_at);
  void run();

  // ---- conversions.cpp ----
  // Wraps an object read from outside the frame at `source`, recording its guard.
  SymValue wrap(PyObject* obj, const SourcePtr& source);
  void read_unread(SymValue& v);  // an Unread value (values.h) wrapped in place: its first read
  // A trace-time constant (from co_consts or folding): no guard.
  static SymValue constant(PyObject* obj) { return SymValue::constant(obj); }
  // The __exit__ a grad-mode `with` block leaves on the stack: items {manager, the mode before
  // the block, the block's mode} (True/False constants). Calling it restores the mode before;
  // a continuation that resumes inside the block gets a real one (continuation.cpp).
  static SymValue grad_exit(SymValue manager, bool prev, bool mode) {
    SymValue exit;
    exit.kind = SymValue::Kind::BoundMethod;
    exit.name = "__fd_grad_exit__";
    exit.items = {std::move(manager), constant(prev ? Py_True : Py_False), constant(mode ? Py_True : Py_False)};
    return exit;
  }
  codegen::CallArg to_call_arg(const SymValue& v) const;
  // A subscript's index: a tuple is a multi-dimensional index (Tuple), a list is advanced
  // indexing (IntList/TensorList), anything else converts as to_call_arg does.
  codegen::CallArg index_arg(const SymValue& v) const;
  // New reference to the Python object of a constant-only value (tuples built in the trace too).
  PyObject* materialize(const SymValue& v) const;
  SymValue from_capture(codegen::Family fam, const codegen::CaptureResult& r) const;
  const codegen::TensorMeta& meta(const SymValue& v) const { return result_.graph.meta(v.tensor); }
  // Python code is about to see tensor v's sizes (dim `dim`, or all of them and its strides):
  // their symbols are pinned, since the code may decide anything from the numbers.
  const codegen::TensorMeta& read_sizes(const SymValue& v, int64_t dim = -1);
  std::string where() const;  // "file.py:123" of the instruction being traced
  // x.shape / x.size() of a tensor with size symbols: a tuple of ints, the symbolic ones tagged
  // with their expressions (SymValue::size; values.h says what reading them does).
  SymValue symbolic_shape(const SymValue& t);
  // Int arithmetic that keeps size expressions (operators.cpp); nullopt: not such a case.
  std::optional<SymValue> size_arithmetic(const std::string& op, const SymValue& a, const SymValue& b);
  std::optional<SymValue> size_comparison(const std::string& op, const SymValue& a, const SymValue& b);
  // The dims of input tensor `obj` (read from source `name`) that become size symbols: by the
  // frame's DynamicMode, mark_dynamic, and the code's shape history (which this updates).
  std::vector<int64_t> dynamic_dims(PyObject* obj, const at::Tensor& t, const std::string& name);
  void add_guard(const SourcePtr& source, GuardKind kind, PyObject* obj);
  // Plain objects of Python classes read from outside the frame are guarded by type and alias
  // slot, not identity (GuardKind::Instance). by_type: `v` is such a read (it has its source).
  bool by_type(const SymValue& v) const {
    return v.kind == SymValue::Kind::Constant && v.source && type_guarded_.count(v.obj) != 0;
  }
  // The trace is about to depend on which object a value holds (identity against a fixed object,
  // equality, hash, real Python code run on it at trace time): every type-guarded instance in it
  // gets an identity guard too, as any other object has.
  void pin(const SymValue& v) const;
  // The trace resolved owner.name through owner's class to `found` (nullptr: no such attribute
  // anywhere): guard that the class still answers so and that the object has no own attribute of
  // that name (GuardKind::TypeAttr). Owners without a source are fixed objects: nothing to add.
  void guard_class_attr(const SymValue& owner, const std::string& name, PyObject* found);
  // What `name` finds on the object at `source` is its class's `found` (nullptr: nothing), not
  // an attribute of its own (GuardKind::TypeAttr).
  void guard_type_attr(const SourcePtr& source, const std::string& name, PyObject* found);
  // Whether the constant `owner` has attribute `name` (hasattr, getattr with a default). When it
  // has not, guards that it stays so, or raises Unsupported where that cannot be guarded or
  // finding out would run the class's own __getattr__.
  // A getter it inlines to find out (a property's, a descriptor's Python __get__: hasattr runs
  // it, as getattr does) leaves its result in *value, so that getattr does not run it twice.
  bool has_attr_guarded(const SymValue& owner, const std::string& name, std::optional<SymValue>* value = nullptr);
  // Guards that none of the nn.Module owner's _parameters, _buffers and _modules holds `name`.
  void guard_module_lacks(const SymValue& owner, const std::string& name);
  // Whether `owner.name = value` on an nn.Module is what object.__setattr__ does: its class's
  // __setattr__ is nn.Module's, value is no tensor, Parameter or Module, and none of its three
  // dicts holds the name (then Module.__setattr__ stores into the instance dict). Guards so.
  bool plain_module_store(const SymValue& owner, const std::string& name, const SymValue& value);
  // owner.name = value (STORE_ATTR, setattr): on an object made in the trace, or an object from
  // outside whose store is replayed after the graph; Unsupported where the store runs code.
  void store_attr(const SymValue& owner, const std::string& name, const SymValue& value);
  // del owner.name (DELETE_ATTR, delattr) on an object from outside: replayed after the graph
  // (a SetAttr effect whose value is Null); later reads in the trace find it missing.
  void delete_attr(const SymValue& owner, const std::string& name);
  // `container`, a list or dict the caller can see (it has a source), is about to be mutated
  // (`what`: "append", "item assignment" ...). The trace mutates its symbolic items, and the
  // transformed code gives the real object those final contents after the graph
  // (SideEffect::SetContents), as eager would have left it. Unsupported where that could not be
  // exact: the object was also read through another path before (two boxes of one object).
  void mutate_visible(const SymValue& container, const std::string& what);
  // Unsupported when `container` (a list or dict, made in the trace or not) has an iterator the
  // trace is still stepping: the trace iterates a snapshot, eager's iteration would see the
  // mutation (or raise, for a dict that changes size).
  void check_not_iterating(const SymValue& container, const std::string& what) const;
  // The value the trace itself stored in obj.name earlier (replayed after the graph; Null where
  // it deleted it), if any.
  const SymValue* written_attr(PyObject* obj, const std::string& name) const {
    return const_cast<Tracer*>(this)->written_attr_slot(obj, name);
  }
  SymValue* written_attr_slot(PyObject* obj, const std::string& name) {
    for (auto& [o, n, v] : written_attrs_)
      if (o == obj && n == name) return &v;
    return nullptr;
  }
  void note_written_attr(const SymValue& owner, const std::string& name, const SymValue& value);
  // A call of `name` on `target` with the constant arguments `args` (a tuple), replayed after
  // the graph in program order (SideEffect::CallMethod).
  void replay_call(const SymValue& target, const std::string& name, PyObject* args);
  // Whether the trace stored an attribute of obj (to be replayed after the graph).
  bool written_attrs_of(PyObject* obj) const {
    for (const auto& w : written_attrs_)
      if (std::get<0>(w) == obj) return true;
    return false;
  }
  // a == b on two constants, in Python (pins both): 1, 0, or -1 with the error set.
  int equal(const SymValue& a, const SymValue& b) const {
    for (const SymValue* v : {&a, &b})
      if (!compares_in_c(v->obj))
        throw Unsupported(std::string("== on a ") + Py_TYPE(v->obj)->tp_name + " runs a Python __eq__");
    pin(a);
    pin(b);
    return PyObject_RichCompareBool(a.obj, b.obj, Py_EQ);
  }

  // ---- recording ----
  SymValue call_family(codegen::Family fam, const std::vector<SymValue>& args,
                       const std::vector<std::pair<std::string, SymValue>>& kwargs, const char* what);
  SymValue record(codegen::Family fam, const std::vector<codegen::CallArg>& args,
                  const std::vector<std::pair<std::string, codegen::CallArg>>& kwargs, const char* what);

 private:
  friend struct Handlers;
  friend struct Calls;
  friend class DeepCopier;  // deep_copy.cpp

  // list.append, dict.get ...: methods of containers made in the trace (containers.cpp).
  SymValue container_method(SymValue self, const std::string& name, std::vector<SymValue> args,
                            std::vector<std::pair<std::string, SymValue>> kwargs);

  FrameState& fr() { return *frames_.back(); }
  // The root frame's free-variable cell holding the real cell `cell`, or nullptr.
  const SymValue* root_free_cell(PyObject* cell) const {
    const FrameState& root = *frames_.front();
    const int nfree = root.code->co_nfreevars, first = root.code->co_nlocalsplus - nfree;
    for (int i = first; i < root.code->co_nlocalsplus; ++i) {
      const auto& c = root.locals[static_cast<size_t>(i)];
      if (c && c->kind == SymValue::Kind::Cell && c->obj == cell) return &*c;
    }
    return nullptr;
  }
  // Local slot i of the current frame; the root's arguments are wrapped (guarded) on first read.
  SymValue& local(int i);
  SymValue pop();
  SymValue& top(int depth = 0);
  void push(SymValue v) { fr().stack.push_back(std::move(v)); }

  // Runs the frame on top of frames_ to its return (or to stop_at_, for the root).
  void run_frame();
  // A Raised thrown at frames_[index]'s instruction (there, or in a call it inlined): whether a
  // try/except of that frame catches it; if so the trace goes on at the handler, as CPython does
  // (the inlined calls unwound, the stack cut to the handler's depth, the exception pushed).
  bool handle_raised(const Raised& r, size_t index);
  // Whether the instruction running in some traced frame is inside a try block with an except
  // clause that may catch an op's run-time error (not a with block's __exit__, not a finally
  // clause, which re-raise; exceptions.cpp says which classes count).
  bool inside_try_except() const;
  std::vector<SymValue> handled_;  // the exceptions being handled (PUSH_EXC_INFO .. POP_EXCEPT)
  // While an except block the trace entered runs (handled_ not empty), the break point stays at the
  // instruction that raised: a handler that cannot be traced breaks the frame there, as it did
  // before handlers were traced, not somewhere inside the handler.
  bool in_handler() const { return !handled_.empty(); }
  bool entering_handler_ = false;  // handle_raised jumped to a handler: its PUSH_EXC_INFO is next
  bool global_module_hooks_guarded_ = false;  // Calls::call_module: once per trace, not per module call
  void stamp_locations(const FrameState& f, int line, size_t first_node);
  void capture_break_state();

  // ---- calls.cpp ----
  SymValue load_global(const std::string& name);
  SymValue named_tuple_class_attr(const SymValue& owner, const std::string& name);
  SymValue object_operator(const std::string& sym, const SymValue& a, const SymValue& b);
  // Enters grad mode `mode` in the trace: the nodes recorded since the last change are stamped
  // with the mode they were recorded under (Node::grad_enabled). finish_grad_stamps at the end.
  void set_grad_mode(bool mode);
  void finish_grad_stamps();
  // ---- with_blocks.cpp ----
  // BEFORE_WITH of manager `mgr` (popped): pushes its __exit__ and what __enter__ returned, or
  // throws Unsupported / NoBreak for managers the trace does not enter.
  void enter_with(SymValue mgr);
  // STORE_GLOBAL: the root frame's global `name` = value, replayed after the graph
  // (SideEffect::SetGlobal); later reads in the trace see value. Unsupported for another
  // module's globals (an inlined function's).
  void store_global(const std::string& name, SymValue value);
  SymValue load_attr(const SymValue& owner, const std::string& name);
  SymValue tensor_attr(const SymValue& t, const std::string& name);
  SymValue call(const SymValue& callable, std::vector<SymValue> args,
                std::vector<std::pair<std::string, SymValue>> kwargs);
  SymValue call_tensor_method(const SymValue& self, const std::string& name, std::vector<SymValue> args,
                              std::vector<std::pair<std::string, SymValue>> kwargs);
  SymValue binary(const char* symbol, const SymValue& a, const SymValue& b);
  SymValue subscript(const SymValue& container, const SymValue& index);
  SymValue tensor_keyed_item(const SymValue& container, const SymValue& index);
  std::vector<SymValue> unpack(const SymValue& seq, int n);
  SymValue make_iterator(const SymValue& iterable);
  SymValue module_children(const SymValue& module, bool named);  // operators.cpp
  // ---- objects.cpp: objects of plain Python classes made in the trace (SymValue::Kind::Object)
  static bool plain_class(PyObject* type);  // calling it makes an Object (its __init__ inlined)
  SymValue new_object(PyObject* type, std::vector<SymValue> args, std::vector<std::pair<std::string, SymValue>> kwargs);
  // Python's generic attribute lookup on an Object, past class `after` in its MRO for super()
  // (nullptr: the whole lookup). False: no such attribute (an AttributeError in eager).
  bool object_lookup(const SymValue& self, const std::string& name, SymValue* out, PyObject* after = nullptr);
  SymValue object_attr(const SymValue& self, const std::string& name, PyObject* after = nullptr);
  void store_object_attr(const SymValue& self, const std::string& name, const SymValue& value);
  void delete_object_attr(const SymValue& self, const std::string& name);
  // object.__setattr__(o, name, value) / object.__getattribute__(o, name) called on an Object:
  // its box, generically (false: not such a call).
  bool object_slot_call(PyObject* fn, const std::vector<SymValue>& args, SymValue* out);
  // A Raised that C++ code of the trace catches for the Python code it stands for (hasattr's
  // AttributeError, Sequence.__iter__'s IndexError) leaves the inlined calls above `depth`: only
  // when none of them has a block (a try, a with) that would have seen it first (false: none
  // left). (objects.cpp)
  bool unwind_to(size_t depth);
  // A list subclass that adds methods or properties and changes nothing a list does (no list
  // method, __init__ or __new__ of its own): its instances are Lists tagged with the class.
  static bool plain_list_subclass(PyObject* type);
  SymValue new_list_subclass(PyObject* type, std::vector<SymValue> args, std::vector<std::pair<std::string, SymValue>> kwargs);
  // `name` on such a list found in its class (not list's own): a bound method, a property's
  // value... False: list's own attribute (a container method) or none.
  bool list_subclass_member(const SymValue& self, const std::string& name, SymValue* out);
  // The items of a Sequence's own __iter__ (collections.abc.Sequence.__iter__: self[0], self[1]...
  // up to the first IndexError), or nullopt when `v`'s class iterates otherwise.
  std::optional<std::vector<SymValue>> sequence_items(const SymValue& v);
  // The caller's tensor a graph-input value was read from (borrowed), or nullptr.
  PyObject* input_object(const SymValue& t) const {
    if (t.obj) return t.obj;
    for (const auto& [o, id] : tensor_inputs_)
      if (id == t.tensor) return o;
    return nullptr;
  }
  // module.parameters() / named_parameters() / buffers() / named_buffers() (slot "_parameters"
  // or "_buffers"), unrolled over the module tree; operators.cpp.
  SymValue module_members(const SymValue& module, const char* slot, bool named, bool recurse, const std::string& prefix);
  void guard_module_count(const SymValue& container);
  bool truth(const SymValue& v, const char* what);  // trace-time truth value, or Unsupported

  const FrameInputs& frame_;
  TraceResult& result_;
  codegen::CaptureContext ctx_;
  std::vector<std::unique_ptr<FrameState>> frames_;
  std::unordered_map<PyObject*, codegen::ValueId> tensor_inputs_;  // live tensor -> graph input
  std::unordered_map<PyObject*, SourcePtr> type_guarded_;  // instance -> the source of its first read
  int nargs_ = 0;       // argument slots of the root frame
  int wrap_depth_ = 0;  // wrap()'s recursion into lists and dicts
  bool unread_items_ = false;  // wrap() of a continuation's argument list: its items stay Unread
  int stop_at_ = -1;    // root instruction index at which to stop and record a break
  bool entry_grad_ = true;    // the grad mode the frame was entered in
  size_t grad_stamped_ = 0;  // nodes before this one carry their grad mode (set_grad_mode)
  bool generic_lookup_ = false;  // the next load_attr is object.__getattribute__'s (attributes.cpp)
  // The autocast state before each torch.autocast block the trace is inside (innermost last).
  std::vector<runtime::AutocastState> autocast_outside_;
  // Attribute values written during the trace (result_.effects), read back by later reads.
  std::vector<std::tuple<PyObject*, std::string, SymValue>> written_attrs_;
  std::unordered_map<std::string, SymValue> written_globals_;  // store_global's, by name
  std::set<std::pair<PyObject*, std::string>> deleted_attrs_;   // delete_attr's (their stores are never merged)
  // Lists and dicts the caller passed (wrap), by object: the boxes of their reads, one per path
  // read before a mutation; once the trace mutates one (mutate_visible), every later read of
  // that object shares the mutated box.
  std::unordered_map<PyObject*, std::vector<const SymBox*>> visible_boxes_;
  std::unordered_map<const SymBox*, PyObject*> visible_object_;
  std::unordered_map<PyObject*, SymValue> visible_value_;  // the first read of each (by object)
  // Stateless torch.nn modules the frame makes (calls.cpp: made for real at trace time, one
  // object for every call of the compiled code): none may outlive the frame (run() checks).
  std::vector<SymValue> made_modules_;  // constants (own their object)
  bool holds_made_module(const SymValue& v, int depth = 0) const;
  std::unordered_map<PyObject*, SymValue> mutated_visible_;
  std::set<const SymBox*> iterated_boxes_;  // dicts whose keys()/values()/items() the trace took (a snapshot)
  // Iterators the trace made over lists and dicts (a snapshot of their items): (container, iterator).
  std::vector<std::pair<const SymBox*, std::shared_ptr<SymBox>>> live_iterators_;
};

// Python name of a value for messages: "Tensor", "int 3", "<function f>".
std::string describe(const SymValue& v);
std::string py_repr(PyObject* o);
PyObject* module_type();  // torch.nn.Module (borrowed, kept for the process)

// Shared by attributes.cpp, calls.cpp and operators.cpp.
SourcePtr const_source(PyObject* obj, const std::string& label);  // K['label']: a fixed object
bool is_plain_value(PyObject* o);          // None, bool, int, float, str, dtype, device, tuples of them
// A builtin number, string, bytes or None: what isinstance() and type() read of it is its exact
// type (a continuation argument of this kind goes on the stack unread: interpreter.cpp load_fast).
bool plain_scalar(PyObject* o);
// A value of built-in types all the way down (no object of a Python class, no iterator): what
// a folded builtin or operator does to it runs no user code.
bool holds_only_builtin_values(PyObject* o, int depth = 0);
PyObject* tensor_type();                   // torch.Tensor (borrowed)
const char* operator_name(const std::string& sym);               // "+" -> "operator.add"
PyObject* fold_binary(const std::string& sym, PyObject* a, PyObject* b);  // new ref or nullptr
bool foldable_constant(PyObject* o);       // ints, floats, strings, tuples, dtypes... (no user code)
SourcePtr child_source(const SourcePtr& parent, Source::Kind kind, const std::string& name, int index = 0);
bool is_model_output(PyObject* type);      // transformers' ModelOutput dataclasses
// Whether leaving a `with` on `mgr` can never swallow the block's exception (break_points.cpp):
// such a block may be entered for real at a graph break.
bool exit_never_suppresses(PyObject* mgr);
bool is_namedtuple_type(PyObject* o);      // a tuple subclass with _fields (collections/typing namedtuples)
// A namedtuple class whose __new__ is the one namedtuple generated and without an __init__ of
// its own: calling it makes exactly tuple.__new__(cls, fields) and runs nothing else.
bool namedtuple_generated_new(PyObject* type);
bool has_standard_getattribute(PyTypeObject* tp);  // object's __getattribute__ (maybe with a __getattr__)
SymValue iterator_of(std::vector<SymValue> items);
// The Python type of a constant, or the class of an object made in the trace (Kind::Object).
inline PyTypeObject* value_type(const SymValue& v) {
  return v.kind == SymValue::Kind::Object ? reinterpret_cast<PyTypeObject*>(v.obj) : Py_TYPE(v.obj);
}
// The builtin the transformed code calls to build an Object after the graph: (class, attributes).
PyObject* object_builder();
// A Set of the trace around `set` (a real set only the trace holds: values.h, Kind::Set).
SymValue set_value(PyObject* set);
// A real set of a Set, or of a constant set or frozenset (new reference: a copy of a Set's), or
// nullptr for anything else. Its items are constants whose hash and == run no Python code.
PyObject* set_operand(const SymValue& v);
std::vector<SymValue> remaining(const SymValue& iterator);     // the items not yet produced
std::vector<SymValue> model_output_items(const SymValue& record);  // ModelOutput's tuple view

struct PyOwned {  // one owned reference, released at scope exit
  PyObject* p;
  explicit PyOwned(PyObject* o) : p(o) {}
  ~PyOwned() { Py_XDECREF(p); }
  PyOwned(const PyOwned&) = delete;
  PyOwned& operator=(const PyOwned&) = delete;
};

}  // namespace fastdyn::symbolic
