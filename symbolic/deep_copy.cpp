// symbolic/deep_copy.cpp — copy.deepcopy(x) in the trace, answered as the copy it makes.
//
// transformers copies configs in the forward (`config.get_text_config(decoder=True)` of an
// encoder-decoder model deep-copies the config, then renames its decoder_* attributes; to_dict()
// deep-copies the copy's __dict__). Inlining copy.deepcopy reaches what the trace cannot follow:
// id() of objects made in the trace (the memo), object.__reduce_ex__, y.__dict__.update. What
// deepcopy makes of the values a trace holds is known without running it, as Dynamo's inlining
// finds: atomic values are themselves; lists, dicts and tuples are new containers of copies; an
// object of a class on copy's default path (no __deepcopy__, object's __reduce_ex__, __reduce__
// and __getstate__, object's __new__, an instance dict and no slots) is a new object of its class,
// made without __init__, whose __dict__ holds copies of the original's attributes. So the copy is
// built here as values of the trace: a list of the trace, a dict of the trace, an Object
// (objects.cpp). A real object's attributes are read through its __dict__, each guarded (with the
// dict's keys) as any read is, and its class is guarded to keep the lookups above.
//
// Anything else (a tensor, a set, a class with its own copy protocol, deepcopy(x, memo), a real
// object reached by no path that guards could follow) is left to copy.deepcopy itself, inlined
// as written. Shared references inside the value stay shared in the copy (one copy per object,
// as deepcopy's memo keeps), and the real containers and objects copied are guarded by identity,
// so that what is shared stays what the trace saw.
#include <Python.h>

#include <unordered_map>

#include "runtime/errors.h"
#include "symbolic/calls.h"
#include "symbolic/py_ops.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {

namespace {

struct NotCopied {};  // the value is not one this file copies: copy.deepcopy runs as written

// The types copy.deepcopy returns as they are (copy._deepcopy_atomic's), and torch.dtype (whose
// __reduce__ names it: the copy is the same object).
bool atomic(PyObject* o) {
  if (o == Py_None || o == Py_Ellipsis || o == Py_NotImplemented) return true;
  if (PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) || PyComplex_CheckExact(o) || PyUnicode_CheckExact(o) ||
      PyBytes_CheckExact(o))
    return true;
  if (PyType_Check(o) || PyFunction_Check(o) || PyCFunction_Check(o) || PyCode_Check(o) || PyRange_Check(o) ||
      Py_IS_TYPE(o, &PyProperty_Type) || PyWeakref_CheckRefExact(o))
    return true;
  static PyObject* float32 = resolve_python_name("torch.float32");  // NB: kept for the process
  return float32 && Py_IS_TYPE(o, Py_TYPE(float32));
}

PyObject* type_entry(PyTypeObject* tp, const char* name) {  // borrowed, or nullptr
  PyOwned key(interned_name(name));
  return key.p ? _PyType_Lookup(tp, key.p) : nullptr;
}

PyObject* object_entry(const char* name) { return type_entry(&PyBaseObject_Type, name); }

// Whether copy.deepcopy of an instance of tp, a plain class (objects.cpp: object's __new__, an
// instance dict, no slots, no C layout), takes the default path: _reconstruct of
// object.__reduce_ex__(4), i.e. copyreg.__newobj__(cls) and y.__dict__.update(deepcopy(state)).
bool default_copy_path(PyTypeObject* tp) {
  static PyObject* dispatch = resolve_python_name("copyreg.dispatch_table");  // NB: kept for the process
  if (!dispatch || !PyDict_Check(dispatch) || PyDict_GetItem(dispatch, reinterpret_cast<PyObject*>(tp))) return false;
  if (type_entry(tp, "__deepcopy__") || type_entry(tp, "__setstate__") || type_entry(tp, "__getnewargs_ex__") ||
      type_entry(tp, "__getnewargs__"))
    return false;
  for (const char* name : {"__reduce_ex__", "__reduce__", "__getstate__"})
    if (type_entry(tp, name) != object_entry(name)) return false;
  return true;
}

}  // namespace

class DeepCopier {
 public:
  explicit DeepCopier(Tracer& t) : t_(t) {}

  // v's copy; `real` is the object v was read from (nullptr: a value made in the trace).
  SymValue copy(const SymValue& v, PyObject* real, int depth) {
    using K = SymValue::Kind;
    if (depth > 32) throw NotCopied{};
    if (v.kind == K::Constant && v.size) return v;  // a size-derived int: an int
    switch (v.kind) {
      case K::Constant:
        if (atomic(v.obj)) return v;
        if (PyTuple_CheckExact(v.obj)) {  // a constant tuple of atomic values is itself
          for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v.obj); ++i)
            if (!atomic(PyTuple_GET_ITEM(v.obj, i))) throw NotCopied{};
          return v;
        }
        return real_object(v, depth);
      case K::Tuple: {
        if (v.torch_size) return v;
        if (real && (!PyTuple_CheckExact(real) || PyTuple_GET_SIZE(real) != static_cast<Py_ssize_t>(v.items.size()))) throw NotCopied{};
        std::vector<SymValue> items;
        for (size_t i = 0; i < v.items.size(); ++i)
          items.push_back(copy(v.items[i], real ? PyTuple_GET_ITEM(real, static_cast<Py_ssize_t>(i)) : nullptr, depth + 1));
        return SymValue::tuple(std::move(items));
      }
      case K::List:
      case K::Dict:
      case K::Object: {
        if (!v.box || (v.kind != K::Object && v.obj)) throw NotCopied{};  // a list subclass, an OrderedDict
        if (real && !(v.kind == K::List ? PyList_CheckExact(real) : v.kind == K::Dict && PyDict_CheckExact(real))) throw NotCopied{};
        if (real) identity(v, real);
        const void* key = real ? static_cast<const void*>(real) : v.box.get();
        if (auto seen = memo_.find(key); seen != memo_.end()) return seen->second;
        SymValue c = SymValue::boxed(v.kind == K::Object ? K::Dict : v.kind);
        c.kind = v.kind;
        if (v.kind == K::Object) c.obj = Py_NewRef(v.obj);
        memo_.emplace(key, c);
        fill(c, v, real, depth);
        return c;
      }
      default:
        throw NotCopied{};  // tensors, sets, records, functions of the trace, iterators ...
    }
  }

 private:
  // A real container or object copied: deepcopy's memo keeps one copy per object, so the copy
  // shares what the original shares. Which objects are one is guarded by identity.
  void identity(const SymValue& v, PyObject* real) {
    if (!v.source) throw NotCopied{};
    t_.add_guard(v.source, GuardKind::IdIs, real);
  }

  // The copy's keys (a dict's, an object's attribute names: constants, themselves if atomic) and
  // its items, copied from v's (read from `real`, a list or dict, when not null).
  void fill(SymValue& c, const SymValue& v, PyObject* real, int depth) {
    const std::vector<SymValue>& keys = v.box->keys;
    const std::vector<SymValue>& items = v.box->items;
    if (real && PyList_Check(real) && PyList_GET_SIZE(real) != static_cast<Py_ssize_t>(items.size())) throw NotCopied{};
    if (real && PyDict_Check(real) && PyDict_GET_SIZE(real) != static_cast<Py_ssize_t>(items.size())) throw NotCopied{};
    for (const SymValue& k : keys) {
      if (k.kind != SymValue::Kind::Constant || !atomic(k.obj)) throw NotCopied{};
      c.box->keys.push_back(k);
    }
    for (size_t i = 0; i < items.size(); ++i) {
      PyObject* item = nullptr;
      if (real && PyList_Check(real)) item = PyList_GET_ITEM(real, static_cast<Py_ssize_t>(i));
      if (real && PyDict_Check(real) && !(item = PyDict_GetItemWithError(real, keys[i].obj))) {
        PyErr_Clear();
        throw NotCopied{};
      }
      c.box->items.push_back(copy(items[i], item, depth + 1));
    }
  }

  // An object the caller can reach (read through a path the guards follow).
  SymValue real_object(const SymValue& v, int depth) {
    PyObject* o = v.obj;
    auto* tp = Py_TYPE(o);
    if (!v.source || !Tracer::plain_class(reinterpret_cast<PyObject*>(tp)) || !default_copy_path(tp)) throw NotCopied{};
    identity(v, o);
    if (auto seen = memo_.find(o); seen != memo_.end()) return seen->second;
    PyOwned state(PyObject_GenericGetDict(o, nullptr));
    if (!state.p) { PyErr_Clear(); throw NotCopied{}; }
    if (!PyDict_CheckExact(state.p) || PyDict_GetItemString(state.p, "__deepcopy__")) throw NotCopied{};
    // What copy looks up on the class stays what it found (a class can be given a __deepcopy__).
    for (const char* name : {"__deepcopy__", "__reduce_ex__", "__reduce__", "__getstate__"})
      t_.guard_type_attr(v.source, name, type_entry(tp, name));
    SymValue dict = t_.wrap(state.p, child_source(v.source, Source::Kind::Attr, "__dict__"));
    if (dict.kind != SymValue::Kind::Dict || !dict.box) throw NotCopied{};
    for (const SymValue& k : dict.box->keys)
      if (!k.is_constant() || !PyUnicode_CheckExact(k.obj)) throw NotCopied{};
    SymValue c = SymValue::boxed(SymValue::Kind::Dict);
    c.kind = SymValue::Kind::Object;
    c.obj = Py_NewRef(reinterpret_cast<PyObject*>(tp));
    memo_.emplace(o, c);
    fill(c, dict, state.p, depth);
    return c;
  }

  Tracer& t_;
  std::unordered_map<const void*, SymValue> memo_;  // by the real object's address, or the box's
};

bool Calls::deep_copy(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs, SymValue& out) {
  static PyObject* deepcopy = resolve_python_name("copy.deepcopy");  // NB: kept for the process
  if (!deepcopy || fn != deepcopy || args.size() != 1 || !kwargs.empty()) return false;
  try {
    out = DeepCopier(t).copy(args[0], nullptr, 0);
  } catch (const NotCopied&) {
    return false;
  }
  return true;
}

}  // namespace fastdyn::symbolic
