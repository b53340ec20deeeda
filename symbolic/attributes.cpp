// symbolic/attributes.cpp — reading names and attributes: globals and builtins (with their
// sources), attributes of modules, classes, plain objects and nn.Modules (parameters, buffers
// and submodules read where nn.Module keeps them), properties inlined, bound methods, and the
// metadata attributes of tensors.
#include <torch/csrc/Device.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "runtime/errors.h"
#include "symbolic/py_ops.h"
#include "symbolic/calls.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {

using codegen::Family;

// ---------------------------------------------------------------------------------------------
// Reading names and attributes

SymValue Tracer::load_global(const std::string& name) {
  FrameState& f = fr();
  const bool root_globals = f.globals == frame_.globals;
  if (root_globals) {
    auto w = written_globals_.find(name);
    if (w != written_globals_.end()) return w->second;
  }
  auto src = std::make_shared<Source>();
  src->name = name;
  PyObject* v = dict_item(f.globals, name);
  if (v) {
    if (root_globals) {
      src->kind = Source::Kind::Global;
    } else {
      src->kind = Source::Kind::DictItem;
      PyObject* modname = dict_item(f.globals, "__name__");
      src->parent = const_source(f.globals, modname && PyUnicode_Check(modname) ? PyUnicode_AsUTF8(modname) : "globals");
    }
    return wrap(v, src);
  }
  v = dict_item(frame_.builtins, name);
  if (!v) throw Unsupported("name '" + name + "' is not defined");
  if (root_globals) {
    src->kind = Source::Kind::Builtin;  // guarded: no global of this name may appear later
    return wrap(v, src);
  }
  // NB: an inlined function's module gaining a global that shadows this builtin is not guarded.
  src->kind = Source::Kind::DictItem;
  src->parent = const_source(frame_.builtins, "builtins");
  return wrap(v, src);
}

void Tracer::store_global(const std::string& name, SymValue value) {
  if (fr().globals != frame_.globals) throw Unsupported("assignment to the global '" + name + "' of another module");
  if (value.kind == SymValue::Kind::Iterator || value.kind == SymValue::Kind::Cell)
    throw Unsupported("storing a " + describe(value) + " in the global '" + name + "'");
  // The global's old value is released after the graph, not where eager drops it: it may not
  // run code when released.
  PyObject* old = PyDict_GetItemString(frame_.globals, name.c_str());
  if (!written_globals_.count(name) && old && (Py_TYPE(old)->tp_finalize || Py_TYPE(old)->tp_del))
    throw Unsupported("assignment to the global '" + name + "', which holds an object with a finalizer");
  auto& effects = result_.effects;
  auto same = std::find_if(effects.begin(), effects.end(), [&](const TraceResult::SideEffect& e) {
    return e.kind == TraceResult::SideEffect::Kind::SetGlobal && e.name == name;
  });
  if (same != effects.end()) same->value = value;
  else effects.push_back({SymValue::null(), name, value, TraceResult::SideEffect::Kind::SetGlobal});
  written_globals_[name] = std::move(value);
}

namespace {


PyObject* object_getattribute() {
  static PyObject* f = PyObject_GetAttrString(reinterpret_cast<PyObject*>(&PyBaseObject_Type), "__getattribute__");
  return f;
}

}  // namespace

bool has_standard_getattribute(PyTypeObject* tp) {
  static PyObject* const key = interned_name("__getattribute__");
  return _PyType_Lookup(tp, key) == object_getattribute() || tp->tp_getattro == PyObject_GenericGetAttr;
}

bool typing_form(PyObject* o) {
  static PyObject* union_type = resolve_python_name("types.UnionType");  // NB: kept for the process
  return Py_IS_TYPE(o, &Py_GenericAliasType) || reinterpret_cast<PyObject*>(Py_TYPE(o)) == union_type;
}

// What a typing form holds: classes, None, typing forms, tuples of them.
bool typing_part(PyObject* o, int depth = 0) {
  if (o == Py_None || PyType_Check(o) || typing_form(o)) return true;
  if (!PyTuple_CheckExact(o) || depth > 8) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i)
    if (!typing_part(PyTuple_GET_ITEM(o, i), depth + 1)) return false;
  return true;
}

PyObject* python_dunder(PyTypeObject* tp, const char* dunder) {
  PyOwned key(interned_name(dunder));
  PyObject* f = key.p ? _PyType_Lookup(tp, key.p) : nullptr;
  if (!f || f == Py_None || PyCFunction_Check(f) || Py_IS_TYPE(f, &PyWrapperDescr_Type) || Py_IS_TYPE(f, &PyMethodDescr_Type) ||
      Py_IS_TYPE(f, &PyClassMethodDescr_Type))
    return nullptr;
  return f;
}

namespace {

// Whether `leaf` holds for o and, to a depth of 8, for every item of the lists, tuples, sets and
// dicts (keys and values) within it.
bool every_value(PyObject* o, bool (*leaf)(PyObject*), int depth) {
  if (!o || depth > 8 || !leaf(o)) return false;
  if (PyDict_Check(o)) {
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(o, &pos, &k, &v))
      if (!every_value(k, leaf, depth + 1) || !every_value(v, leaf, depth + 1)) return false;
  } else if (PyList_Check(o) || PyTuple_Check(o) || PyAnySet_Check(o)) {
    PyOwned fast(PySequence_Fast(o, ""));
    if (!fast.p) { PyErr_Clear(); return false; }
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.p); ++i)
      if (!every_value(PySequence_Fast_GET_ITEM(fast.p, i), leaf, depth + 1)) return false;
  }
  return true;
}

}  // namespace

bool compares_in_c(PyObject* o, int depth) {
  return every_value(o, [](PyObject* x) { return !python_dunder(Py_TYPE(x), "__eq__"); }, depth);
}

bool holds_only_builtin_values(PyObject* o, int depth) {
  // Not an iterator (folding would drain the caller's, for real); no object of a Python class
  // (classes themselves and torch.Size are values).
  return every_value(o, [](PyObject* x) {
    return !PyIter_Check(x) && (!(Py_TYPE(x)->tp_flags & Py_TPFLAGS_HEAPTYPE) || PyType_Check(x) || THPSize_Check(x));
  }, depth);
}

bool is_plain_value(PyObject* o) {
  if (o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) || PyUnicode_CheckExact(o))
    return true;
  if (PyTuple_CheckExact(o)) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i)
      if (!is_plain_value(PyTuple_GET_ITEM(o, i))) return false;
    return true;
  }
  return THPDtype_Check(o) || THPDevice_Check(o);
}

bool Tracer::has_attr_guarded(const SymValue& owner, const std::string& name, std::optional<SymValue>* value) {
  PyObject* o = owner.obj;
  PyTypeObject* tp = Py_TYPE(o);
  PyOwned key(interned_name(name));
  PyOwned hook_name(interned_name("__getattr__"));
  PyObject* hook = _PyType_Lookup(tp, hook_name.p);
  static PyObject* module_getattr = resolve_python_name("torch.nn.Module.__getattr__");  // NB: kept for the process
  const bool nn_module = hook && hook == module_getattr;
  if (hook && !nn_module) {
    // The class's own __getattr__ runs when the attribute is missing: user code, with effects
    // (a counter, a log) the trace would run once and the compiled code never.
    if (!has_standard_getattribute(tp)) throw Unsupported("getattr on a " + std::string(tp->tp_name) + " with its own __getattr__");
    PyObject* found = PyObject_GenericGetAttr(o, key.p);
    if (found) { Py_DECREF(found); return true; }
    PyErr_Clear();
    throw Unsupported("missing attribute '" + name + "' of a " + tp->tp_name + " would run its __getattr__");
  }
  PyObject* module_dict = PyModule_Check(o) ? PyModule_GetDict(o) : nullptr;
  // hasattr is getattr: a property's getter, or a descriptor's Python __get__, runs. It is
  // inlined (as eager runs it); a getter that raises (hasattr's False) ends the trace.
  if (PyObject* type_attr = PyType_Check(o) ? nullptr : _PyType_Lookup(tp, key.p)) {
    PyObject* getter = nullptr;
    if (Py_TYPE(type_attr) == &PyProperty_Type) {
      PyOwned fget(PyObject_GetAttrString(type_attr, "fget"));
      PyErr_Clear();
      if (!fget.p || !PyFunction_Check(fget.p)) throw Unsupported("hasattr(" + describe(owner) + ", '" + name + "') of a property without a Python getter");
      guard_class_attr(owner, name, type_attr);
      SymValue got = call(constant(fget.p), {owner}, {});
      if (value) *value = std::move(got);
      return true;
    }
    if ((getter = python_dunder(Py_TYPE(type_attr), "__get__"))) {
      const bool data = Py_TYPE(type_attr)->tp_descr_set != nullptr;
      PyObject** dictptr = _PyObject_GetDictPtr(o);
      if (data || !dictptr || !*dictptr || !PyDict_GetItemWithError(*dictptr, key.p)) {
        PyErr_Clear();
        guard_class_attr(owner, name, type_attr);
        SymValue got = call(constant(getter), {constant(type_attr), owner, constant(reinterpret_cast<PyObject*>(tp))}, {});
        if (value) *value = std::move(got);
        return true;
      }
    }
  }
  // object's lookup, nn.Module's, or a module's (whose own __getattr__, as torch's, resolves
  // names lazily: taken as pure, and guarded to stay the same function)
  const int has = PyObject_HasAttr(o, key.p);
  if (has) return true;
  // Absent from the object and its class: guarded so. A module looks in its dict (and would call
  // a __getattr__ put there later); nn.Module also in its three dicts.
  if (!owner.source) {
    if (nn_module || module_dict) throw Unsupported("missing attribute '" + name + "' of " + describe(owner) + " reached by no path");
    pin(owner);
    return false;
  }
  if (nn_module || module_dict || (tp->tp_getattro == PyObject_GenericGetAttr && !hook)) {
    guard_class_attr(owner, name, nullptr);
    if (PyObject* module_hook = module_dict ? PyDict_GetItemString(module_dict, "__getattr__") : nullptr)
      add_guard(child_source(owner.source, Source::Kind::Attr, "__getattr__"), GuardKind::IdIs, module_hook);
    else if (module_dict)
      guard_class_attr(owner, "__getattr__", nullptr);
    if (nn_module) guard_module_lacks(owner, name);
  } else {
    pin(owner);  // another lookup (a custom __getattribute__): only this very object is known
  }
  return false;
}

void Tracer::guard_module_lacks(const SymValue& owner, const std::string& name) {
  for (const char* slot : {"_parameters", "_buffers", "_modules"}) {
    GuardSpec g;
    g.source = child_source(owner.source, Source::Kind::Attr, slot);
    g.kind = GuardKind::Lacks;
    g.obj = Py_NewRef(owner.obj);
    g.name = name;
    result_.guards.push_back(std::move(g));
  }
}

bool Tracer::plain_module_store(const SymValue& owner, const std::string& name, const SymValue& value) {
  static PyObject* module_setattr = resolve_python_name("torch.nn.Module.__setattr__");  // NB: kept
  static PyObject* setattr_name = PyUnicode_InternFromString("__setattr__");  // NB: kept
  PyObject* o = owner.obj;
  if (!owner.source || !PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(module_type()))) return false;
  PyObject* found = _PyType_Lookup(Py_TYPE(o), setattr_name);  // borrowed
  if (!found || found != module_setattr) return false;
  using K = SymValue::Kind;
  // A tensor is plain unless it is a Parameter or a Buffer (Module.__setattr__ registers those): a
  // tensor the graph computes never is; an input is checked as it is now (its type is guarded).
  static PyObject* parameter = resolve_python_name("torch.nn.Parameter");  // NB: kept
  static PyObject* buffer = resolve_python_name("torch.nn.Buffer");        // NB: kept
  auto plain_tensor = [&] {
    PyObject* t = value.source ? input_object(value) : nullptr;
    if (value.source && !t) return false;
    return !t || (!PyObject_IsInstance(t, parameter) && !(buffer && PyObject_IsInstance(t, buffer)));
  };
  const bool plain_value = value.kind == K::List || value.kind == K::Tuple || value.kind == K::Dict ||
                           (value.kind == K::Tensor && plain_tensor()) ||
                           (value.kind == K::Constant && !THPVariable_Check(value.obj) &&
                            !PyObject_TypeCheck(value.obj, reinterpret_cast<PyTypeObject*>(module_type())));
  if (!plain_value) return false;
  PyObject** dictptr = _PyObject_GetDictPtr(o);
  if (!dictptr || !*dictptr) return false;
  PyOwned key(PyUnicode_FromString(name.c_str()));
  for (const char* slot : {"_parameters", "_buffers", "_modules"}) {
    PyObject* d = PyDict_GetItemString(*dictptr, slot);  // borrowed
    if (!d || !PyDict_Check(d) || PyDict_Contains(d, key.p) != 0) return false;
  }
  guard_class_attr(owner, "__setattr__", found);
  guard_module_lacks(owner, name);
  return true;
}

// STORE_ATTR, and setattr() with a constant name (builtins.cpp).
void Tracer::store_attr(const SymValue& owner, const std::string& name, const SymValue& value) {
  if (owner.kind == SymValue::Kind::Object) {
    // A __setattr__ of the class's own (a strict dataclass's validators) runs for every store.
    if (PyObject* setattr = python_dunder(reinterpret_cast<PyTypeObject*>(owner.obj), "__setattr__")) {
      PyOwned name_obj(PyUnicode_FromString(name.c_str()));
      call(constant(setattr), {owner, constant(name_obj.p), value}, {});
      return;
    }
    return store_object_attr(owner, name, value);
  }
  if (owner.kind == SymValue::Kind::Record) {
    for (size_t i = 0; i < owner.field_names.size(); ++i)
      if (owner.field_names[i] == name) throw Unsupported("assignment to a field of a record made in the frame");
    throw Unsupported("new attribute on a record made in the frame");
  }
  if (owner.is_tensor() && name == "grad" && value.is_constant() && value.obj == Py_None) {
    // p.grad = None (zero_grad(set_to_none=True)) on a leaf input: replayed after the graph;
    // later reads in the trace see None (tensor_attr).
    PyObject* obj = input_object(owner);
    if (!owner.source || !obj || !THPVariable_Unpack(obj).is_leaf())
      throw Unsupported("'.grad' assignment on a tensor that is not a leaf input");
    for (auto& [o, n, v] : written_attrs_)
      if (o == obj && n == name) return;  // None already
    written_attrs_.emplace_back(obj, name, value);
    result_.effects.push_back({owner, name, value});
    return;
  }
  if (!owner.is_constant() || owner.name == "__super__") throw Unsupported("attribute assignment on " + describe(owner));
  PyTypeObject* tp = Py_TYPE(owner.obj);
  // (An nn.Module's own __setattr__ stores a plain value as object.__setattr__ does; the replay
  // after the graph runs it.)
  const bool module_store = plain_module_store(owner, name, value);
  if (!module_store && (tp->tp_setattro != PyObject_GenericSetAttr || PyType_Check(owner.obj) || PyModule_Check(owner.obj)))
    throw Unsupported(std::string("attribute assignment on a ") + tp->tp_name + " (custom __setattr__)");
  if (value.kind == SymValue::Kind::Iterator || value.kind == SymValue::Kind::Function || value.kind == SymValue::Kind::Cell)
    throw Unsupported("storing a " + describe(value) + " in an attribute");
  PyOwned key(PyUnicode_FromString(name.c_str()));
  PyObject* descr = key.p ? _PyType_Lookup(tp, key.p) : nullptr;  // borrowed
  const bool slot = descr && Py_IS_TYPE(descr, &PyMemberDescr_Type);
  // A data descriptor on the type (a property's setter, ...) runs code on assignment, and reads
  // after it would not see the value stored: only __slots__ members store plainly.
  if (descr && Py_TYPE(descr)->tp_descr_set && !slot)
    throw Unsupported(std::string("attribute assignment through a ") + Py_TYPE(descr)->tp_name + " ('" + name +
                      "' of " + tp->tp_name + ")");
  // Replayed after the graph, outside any try block: a store that would raise (an object without
  // a __dict__ and no slot of that name, object() say) must raise where it is.
  if (!slot && !_PyObject_GetDictPtr(owner.obj))
    throw Unsupported(std::string("attribute assignment on a ") + tp->tp_name + " without a __dict__");
  if (!owner.source) pin(owner);  // replayed on this very object
  if (!deleted_attrs_.count({owner.obj, name}))
    if (SymValue* written = written_attr_slot(owner.obj, name)) {
      *written = value;
      // Nothing runs between the replayed stores: the last value, stored where the first store
      // was (which keeps the instance dict's insertion order), is all that is observable. So a
      // tensor overwritten in the frame (a cache layer's empty placeholder replaced by a cat)
      // is not kept alive as a graph output. (After a del, a store is its own, in order.)
      for (TraceResult::SideEffect& e : result_.effects)
        if (e.target.is_constant() && e.target.obj == owner.obj && e.name == name) e.value = value;
      return;
    }
  note_written_attr(owner, name, value);
}

// Records owner.name = value (Null: del owner.name) for later reads, and its replay.
void Tracer::note_written_attr(const SymValue& owner, const std::string& name, const SymValue& value) {
  if (SymValue* written = written_attr_slot(owner.obj, name)) *written = value;
  else written_attrs_.emplace_back(owner.obj, name, value);
  result_.effects.push_back({owner, name, value});
}

void Tracer::delete_attr(const SymValue& owner, const std::string& name) {
  if (owner.kind == SymValue::Kind::Object) return delete_object_attr(owner, name);
  if (!owner.is_constant() || owner.name == "__super__" || owner.kind != SymValue::Kind::Constant)
    throw Unsupported("del of an attribute of " + describe(owner));
  PyTypeObject* tp = Py_TYPE(owner.obj);
  if (tp->tp_setattro != PyObject_GenericSetAttr || PyType_Check(owner.obj) || PyModule_Check(owner.obj) ||
      !has_standard_getattribute(tp) || !_PyObject_GetDictPtr(owner.obj))
    throw Unsupported(std::string("del of an attribute of a ") + tp->tp_name);
  PyOwned key(PyUnicode_FromString(name.c_str()));
  PyObject* descr = key.p ? _PyType_Lookup(tp, key.p) : nullptr;  // borrowed
  if (descr && Py_TYPE(descr)->tp_descr_set)
    throw Unsupported(std::string("del through a ") + Py_TYPE(descr)->tp_name + " ('" + name + "' of " + tp->tp_name + ")");
  // It must be there (eager raises AttributeError otherwise): read it, which guards it.
  load_attr(owner, name);
  if (!owner.source) pin(owner);
  deleted_attrs_.insert({owner.obj, name});
  note_written_attr(owner, name, SymValue::null());
}

SymValue Tracer::load_attr(const SymValue& owner, const std::string& name) {
  using K = SymValue::Kind;
  // object.__getattribute__ itself (a class's own __getattribute__ calling super()'s): the
  // generic lookup below, whatever the class's own. Taken here, so nested reads are normal.
  const bool generic = std::exchange(generic_lookup_, false);
  if (owner.is_tensor()) return tensor_attr(owner, name);
  // An exception the trace raised and a handler caught (`except E as e`, exceptions.cpp) was
  // never raised for real: no traceback, no context. What reads or changes those is not traced.
  if (owner.name == kTraceException) {
    static const char* unraised[] = {"__traceback__", "__context__", "__cause__", "__suppress_context__",
                                     "__notes__", "with_traceback", "add_note", "__dict__", "__setstate__"};
    for (const char* n : unraised)
      if (name == n) throw Unsupported("the " + name + " of an exception raised in the trace");
  }
  if (owner.kind == K::NamedTuple) {
    for (size_t i = 0; i < owner.field_names.size(); ++i)
      if (owner.field_names[i] == name) return owner.items[i];
    if (name == "_replace") {  // answered on the fields (containers.cpp)
      SymValue m;
      m.kind = K::BoundMethod;
      m.name = name;
      m.items.push_back(owner);
      return m;
    }
    if (owner.obj && name != "__dict__") return named_tuple_class_attr(owner, name);
  }
  if (owner.kind == K::BoundMethod && owner.obj) {
    if (name == "__func__") return constant(owner.obj);
    if (name == "__self__") return owner.items[0];
    return load_attr(constant(owner.obj), name);  // __name__, __code__, __qualname__...
  }
  if (owner.kind == K::List && owner.obj) {  // what a list subclass adds (objects.cpp)
    SymValue out;
    if (list_subclass_member(owner, name, &out)) return out;
  }
  if (owner.kind == K::List || owner.kind == K::Dict || owner.kind == K::Tuple || owner.kind == K::Set) {
    // Only what the container's type has (`t.requires_grad` of a tuple is eager's AttributeError).
    PyObject* type = Calls::type_of(*this, owner);
    if (!PyObject_HasAttrString(type, name.c_str())) throw Raised::no_attribute(reinterpret_cast<PyTypeObject*>(type)->tp_name, name);
    SymValue m;
    m.kind = K::BoundMethod;  // a container method: obj stays null
    m.name = name;
    m.items.push_back(owner);
    return m;
  }
  if (owner.kind == K::Object) {
    // A __getattribute__ of the class's own runs for every read (transformers' configs remap
    // names), inlined; object's (reached through super()) is the generic lookup.
    if (!generic)
      if (PyObject* getattribute = python_dunder(reinterpret_cast<PyTypeObject*>(owner.obj), "__getattribute__")) {
        PyOwned name_obj(PyUnicode_FromString(name.c_str()));
        return call(constant(getattribute), {owner, constant(name_obj.p)}, {});
      }
    return object_attr(owner, name);
  }
  if (owner.name == "__fd_object_super__") return object_attr(owner.items.at(0), name, owner.obj);
  if (owner.kind == K::Record) {
    for (size_t i = 0; i < owner.field_names.size(); ++i)
      if (owner.field_names[i] == name) return owner.items[i];
    if (is_model_output(owner.obj)) {  // methods of ModelOutput: answered on the fields
      SymValue m;
      m.kind = K::BoundMethod;
      m.name = name;
      m.items.push_back(owner);
      return m;
    }
    // Its class's attributes and methods (__dataclass_fields__, a method of a frozen dataclass).
    SymValue out;
    if (object_lookup(owner, name, &out)) return out;
    throw Unsupported("attribute '" + name + "' of " + describe(owner));
  }
  if (!owner.is_constant()) throw Unsupported("attribute '" + name + "' of " + describe(owner));
  // A class or module reached by no path from the frame (type(x), a classmethod's cls) can still
  // be changed: what is read from it is guarded through the object itself.
  // So can an object of a Python class reached by no path (a descriptor found on a class, an
  // object a class attribute holds): its attributes are state, guarded like an argument's.
  const bool user_instance = (Py_TYPE(owner.obj)->tp_flags & Py_TPFLAGS_HEAPTYPE) && !PyType_Check(owner.obj) &&
                             !PyFunction_Check(owner.obj) && !PyMethod_Check(owner.obj);
  if (!owner.source && owner.name.empty() &&
      ((PyType_Check(owner.obj) && !(reinterpret_cast<PyTypeObject*>(owner.obj)->tp_flags & Py_TPFLAGS_IMMUTABLETYPE)) ||
       PyModule_Check(owner.obj) || user_instance)) {
    SymValue sourced = owner;
    sourced.source = const_source(owner.obj, PyType_Check(owner.obj) ? reinterpret_cast<PyTypeObject*>(owner.obj)->tp_name
                                             : PyModule_Check(owner.obj) ? PyModule_GetName(owner.obj)
                                                                         : Py_TYPE(owner.obj)->tp_name);
    generic_lookup_ = generic;
    return load_attr(sourced, name);
  }
  if (!owner.source) pin(owner);  // what is read from it is not guarded: this object itself
  PyObject* o = owner.obj;
  // (A class's own __getattribute__ runs for every read, stored values included: below.)
  if (generic || has_standard_getattribute(Py_TYPE(o)))
    if (const SymValue* written = written_attr(o, name)) {
      if (written->is_null()) throw Unsupported("'" + name + "' was deleted in the frame (AttributeError)");
      return *written;
    }
  if (owner.name == "__super__") {
    if (name == "__getattribute__") {  // object's lookup, done for real on the instance
      SymValue m;
      m.kind = K::BoundMethod;
      m.name = "__fd_generic_getattr__";
      m.items.push_back(owner.items[0]);
      return m;
    }
    PyOwned value(PyObject_GetAttrString(o, name.c_str()));
    if (!value.p) { PyErr_Clear(); throw Unsupported("super()." + name + " does not exist"); }
    if (PyMethod_Check(value.p) && PyFunction_Check(PyMethod_GET_FUNCTION(value.p))) {
      SymValue m;
      m.kind = K::BoundMethod;
      m.name = name;
      m.obj = Py_NewRef(PyMethod_GET_FUNCTION(value.p));
      // A classmethod reached through super() of an instance is bound to the instance's class
      // (guarded with the instance's type), not to the instance.
      PyObject* bound = PyMethod_GET_SELF(value.p);
      m.items.push_back(bound == owner.items[0].obj ? owner.items[0] : constant(bound));
      return m;
    }
    if (!is_plain_value(value.p) && !PyCFunction_Check(value.p)) throw Unsupported("super()." + name + " is not a method");
    return constant(value.p);
  }
  PyObject* value = nullptr;
  // A module's lookup is ModuleType's own (its dict, then a module-level __getattr__), unless a
  // subclass overrides __getattribute__ (user code: taken below like any other class's).
  if (PyModule_Check(o) && Py_TYPE(o)->tp_getattro == PyModule_Type.tp_getattro) {
    value = dict_item(PyModule_GetDict(o), name);
    Py_XINCREF(value);
    if (!value) value = PyObject_GetAttrString(o, name.c_str());  // module __getattr__
  } else if (PyType_Check(o) || foldable_constant(o) || PyCFunction_Check(o) || PyFunction_Check(o) ||
             PyMethod_Check(o) || PyCode_Check(o)) {
    if (PyType_Check(o)) {
      // A class attribute through a Python descriptor (its __get__ with no instance), or a
      // metaclass's own lookup or property, is user code: never run for real here.
      PyOwned key(interned_name(name));
      PyObject* found = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(o), key.p);
      PyObject* meta_found = _PyType_Lookup(Py_TYPE(o), key.p);
      // A metaclass with only a __getattr__ (3.11's EnumType) is not asked for a name the
      // normal lookup finds (an enum member in the class dict).
      static PyObject* getattribute_name = PyUnicode_InternFromString("__getattribute__");  // NB: kept
      const bool plain_lookup = Py_TYPE(o)->tp_getattro == PyType_Type.tp_getattro ||
                                (found && _PyType_Lookup(Py_TYPE(o), getattribute_name) == _PyType_Lookup(&PyType_Type, getattribute_name));
      // A property of the metaclass with a Python getter (torch.distributed's GroupMember.WORLD):
      // inlined on the class, as an instance's property is, guarded to stay the metaclass's.
      if (plain_lookup && meta_found && Py_TYPE(meta_found) == &PyProperty_Type) {
        PyOwned fget(PyObject_GetAttrString(meta_found, "fget"));
        PyErr_Clear();
        if (fget.p && PyFunction_Check(fget.p)) {
          guard_class_attr(owner, name, meta_found);
          return call(constant(fget.p), {owner}, {});
        }
      }
      if (!plain_lookup || (found && python_dunder(Py_TYPE(found), "__get__")) ||
          (meta_found && (Py_TYPE(meta_found) == &PyProperty_Type || python_dunder(Py_TYPE(meta_found), "__get__"))))
        throw Unsupported("class attribute '" + name + "' of " + describe(owner) + " runs Python code");
    }
    value = PyObject_GetAttrString(o, name.c_str());
  } else {
    PyTypeObject* tp = Py_TYPE(o);
    PyOwned key(interned_name(name));
    if (!generic && !has_standard_getattribute(tp)) {
      // A class with its own __getattribute__ in Python (transformers' PretrainedConfig maps
      // names) is inlined like any method: the trace runs exactly what eager runs, with its
      // effects, or breaks. Running it for real here would run user code eager never runs.
      static PyObject* getattribute_name = PyUnicode_InternFromString("__getattribute__");  // kept for the process
      PyObject* getattribute = _PyType_Lookup(tp, getattribute_name);  // borrowed
      if (getattribute && PyFunction_Check(getattribute)) {
        PyOwned name_obj(PyUnicode_FromString(name.c_str()));
        return call(constant(getattribute), {owner, constant(name_obj.p)}, {});
      }
      // A C-level lookup (an extension type's tp_getattro): read the attribute for real; only
      // plain values (guarded by equality) are accepted.
      PyObject* v = PyObject_GetAttr(o, key.p);
      if (!v) { PyErr_Clear(); throw Unsupported("attribute '" + name + "' of " + tp->tp_name + " does not exist"); }
      PyOwned owned(v);
      if (PyMethod_Check(v) && PyMethod_GET_SELF(v) == o && PyFunction_Check(PyMethod_GET_FUNCTION(v))) {
        SymValue m;
        m.kind = K::BoundMethod;
        m.name = name;
        m.obj = Py_NewRef(PyMethod_GET_FUNCTION(v));
        m.items.push_back(owner);
        return m;
      }
      // (A module subclass forwarding names, torch._VF to torch._C._VariableFunctions: its C
      // functions are guarded by identity like any module attribute.)
      // Its submodules too (torch.backends.mha under torch.backends' PropModule).
      // The typing forms `int | None`, `list[int]` are immutable: what they hold (__args__,
      // __origin__) is a constant.
      if (typing_form(o) && typing_part(v)) return constant(v);
      if (!is_plain_value(v) && !PyType_Check(v) && !(PyModule_Check(o) && (PyCFunction_Check(v) || PyModule_Check(v))))
        throw Unsupported("attribute '" + name + "' of " + tp->tp_name + " (custom __getattribute__)");
      SourcePtr src = child_source(owner.source, Source::Kind::Attr, name);
      return src ? wrap(v, src) : constant(v);
    }
    PyObject* type_attr = _PyType_Lookup(tp, key.p);  // borrowed
    const bool data_descriptor = type_attr && Py_TYPE(type_attr)->tp_descr_set;
    // What the class answers (a property, a method, a class-level value, ...) is guarded: the
    // class may be changed, and the object may shadow a non-data attribute with its own, later.
    if (data_descriptor) guard_class_attr(owner, name, type_attr);
    if (data_descriptor) {
      if (Py_TYPE(type_attr) == &PyProperty_Type) {
        PyOwned fget(PyObject_GetAttrString(type_attr, "fget"));
        if (!fget.p || !PyFunction_Check(fget.p)) { PyErr_Clear(); throw Unsupported("property '" + name + "' without a Python getter"); }
        return call(constant(fget.p), {owner}, {});
      }
      if (PyObject* get = python_dunder(Py_TYPE(type_attr), "__get__"))  // a descriptor in Python: inlined
        return call(constant(get), {constant(type_attr), owner, constant(reinterpret_cast<PyObject*>(tp))}, {});
      PyObject* v = PyObject_GetAttr(o, key.p);  // a slot or C-level field
      if (!v) { PyErr_Clear(); throw Unsupported("attribute '" + name + "' of " + tp->tp_name + " raised"); }
      PyOwned owned(v);
      SourcePtr src = child_source(owner.source, Source::Kind::Attr, name);
      return src ? wrap(v, src) : constant(v);
    }
    // Instance dict, then nn.Module's three dicts (its __getattr__ searches them).
    PyObject** dictptr = _PyObject_GetDictPtr(o);
    PyObject* dict = dictptr ? *dictptr : nullptr;
    const char* slot_found = nullptr;
    if (dict) {
      value = PyDict_GetItemWithError(dict, key.p);
      if (!value && !type_attr && PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(module_type()))) {
        for (const char* slot : {"_parameters", "_buffers", "_modules"}) {
          PyObject* d = PyDict_GetItemString(dict, slot);
          if (d && PyDict_Check(d) && (value = PyDict_GetItemWithError(d, key.p))) {
            slot_found = slot;
            break;
          }
        }
      }
      Py_XINCREF(value);
    }
    PyErr_Clear();
    if (value) {
      PyOwned owned(value);
      if (slot_found && owner.source) {
        // Read it where nn.Module keeps it, so guards and the transformed code do a dict lookup
        // instead of calling Module.__getattr__.
        SourcePtr slot_src = child_source(owner.source, Source::Kind::Attr, slot_found);
        return wrap(value, child_source(slot_src, Source::Kind::DictItem, name));
      }
      SourcePtr src = child_source(owner.source, Source::Kind::Attr, name);
      return src ? wrap(value, src) : constant(value);
    }
    if (!type_attr) throw Unsupported("attribute '" + name + "' of " + tp->tp_name + " object does not exist");
    guard_class_attr(owner, name, type_attr);
    if (PyFunction_Check(type_attr)) {
      SymValue m;
      m.kind = K::BoundMethod;
      m.name = name;
      m.obj = Py_NewRef(type_attr);
      m.items.push_back(owner);
      return m;
    }
    if (Py_TYPE(type_attr) == &PyStaticMethod_Type || Py_TYPE(type_attr) == &PyClassMethod_Type) {
      PyOwned fn(PyObject_GetAttrString(type_attr, "__func__"));
      if (!fn.p) { PyErr_Clear(); throw Unsupported("method '" + name + "'"); }
      if (Py_TYPE(type_attr) == &PyStaticMethod_Type) return constant(fn.p);
      SymValue m;
      m.kind = K::BoundMethod;
      m.name = name;
      m.obj = Py_NewRef(fn.p);
      m.items.push_back(constant(reinterpret_cast<PyObject*>(tp)));
      return m;
    }
    // A class-level value of an instance guarded by type: read through the instance, as
    // Python does, so that another instance that set its own is told apart.
    if (by_type(owner) && is_plain_value(type_attr))
      return wrap(type_attr, child_source(owner.source, Source::Kind::Attr, name));
    if (PyType_Check(type_attr) || is_plain_value(type_attr) || PyModule_Check(type_attr) || PyCFunction_Check(type_attr))
      return constant(type_attr);  // a class-level constant: fixed by the type guard
    if (Py_IS_TYPE(type_attr, &PyMethodDescr_Type)) {  // a C method of a builtin base (dict.keys...)
      pin(owner);  // it will read this object's state, which no guard covers
      PyOwned bound(PyObject_GetAttr(o, key.p));
      if (!bound.p) { PyErr_Clear(); throw Unsupported("method '" + name + "' raised"); }
      return constant(bound.p);
    }
    if (PyDict_Check(type_attr) || PyList_Check(type_attr)) {  // a class-level registry: guarded item by item
      SourcePtr src = child_source(owner.source, Source::Kind::Attr, name);
      return src ? wrap(type_attr, src) : wrap(type_attr, child_source(const_source(reinterpret_cast<PyObject*>(tp), tp->tp_name), Source::Kind::Attr, name));
    }
    throw Unsupported("attribute '" + name + "' of " + tp->tp_name + " is a " + Py_TYPE(type_attr)->tp_name);
  }
  if (!value) {
    PyErr_Clear();
    throw Unsupported("attribute '" + name + "' of " + describe(owner) + " does not exist");
  }
  PyOwned owned(value);
  if (!owner.source) return constant(value);  // attribute of a trace-time constant
  // A C method bound to the (guarded) owner is made anew by each read: nothing to guard.
  if (PyCFunction_Check(value) && PyCFunction_GET_SELF(value) == o) {
    pin(owner);  // unless this object is pinned, its state is not guarded
    return constant(value);
  }
  return wrap(value, child_source(owner.source, Source::Kind::Attr, name));
}

SymValue Tracer::tensor_attr(const SymValue& t, const std::string& name) {
  const codegen::TensorMeta& m = meta(t);
  if (name == "shape" && m.symbolic()) return symbolic_shape(t);
  if (name == "shape") {
    // NB: THPSize_NewFromSizes is not exported by libtorch_python; build torch.Size(tuple).
    static PyObject* size_type = reinterpret_cast<PyObject*>(&THPSizeType);
    PyOwned tuple(PyTuple_New(m.dim()));
    for (int64_t i = 0; i < m.dim(); ++i) PyTuple_SET_ITEM(tuple.p, i, PyLong_FromLongLong(m.sizes[static_cast<size_t>(i)]));
    PyOwned s(PyObject_CallOneArg(size_type, tuple.p));
    if (!s.p) { PyErr_Clear(); throw Unsupported("building torch.Size failed"); }
    return constant(s.p);
  }
  if (name == "dtype") return constant(reinterpret_cast<PyObject*>(torch::getTHPDtype(m.dtype)));
  if (name == "device") {
    PyObject* d = THPDevice_New(m.device);
    SymValue v = constant(d);
    Py_DECREF(d);
    return v;
  }
  if (name == "ndim") {
    PyOwned n(PyLong_FromLongLong(m.dim()));
    return constant(n.p);
  }
  if (name == "requires_grad") return constant(m.requires_grad ? Py_True : Py_False);
  if (name == "grad") {
    // A leaf input's gradient (a parameter's, after a backward): read at call time through its
    // source, as the input itself is. A tensor the graph computes has none to read; a non-leaf's
    // read warns in eager at every call.
    PyObject* obj = input_object(t);
    if (!t.source || !obj) throw Unsupported("'.grad' of a tensor the graph computes");
    for (const auto& [o, n, v] : written_attrs_)
      if (o == obj && n == name) return v;  // `p.grad = None` earlier in the trace
    if (!THPVariable_Unpack(obj).is_leaf()) throw Unsupported("'.grad' of a non-leaf tensor (eager warns)");
    PyOwned g(PyObject_GetAttrString(obj, "grad"));
    if (!g.p) { PyErr_Clear(); throw Unsupported("reading '.grad' raised"); }
    return wrap(g.p, child_source(t.source, Source::Kind::Attr, "grad"));
  }
  // Flags of the tensor's kind: a traced tensor is dense, strided and not quantized (wrap()
  // refuses any other), so only the device varies.
  static const std::pair<const char*, bool (*)(const codegen::TensorMeta&)> kFlags[] = {
      {"is_cuda", [](const codegen::TensorMeta& x) { return x.device.is_cuda(); }},
      {"is_cpu", [](const codegen::TensorMeta& x) { return x.device.is_cpu(); }},
      {"is_meta", [](const codegen::TensorMeta& x) { return x.device.is_meta(); }},
      {"is_quantized", [](const codegen::TensorMeta&) { return false; }},
      {"is_sparse", [](const codegen::TensorMeta&) { return false; }},
      {"is_sparse_csr", [](const codegen::TensorMeta&) { return false; }},
      {"is_mkldnn", [](const codegen::TensorMeta&) { return false; }},
      {"is_nested", [](const codegen::TensorMeta&) { return false; }},
  };
  for (const auto& [flag, value] : kFlags)
    if (name == flag) return constant(value(m) ? Py_True : Py_False);
  if (name == "layout") {
    static PyObject* strided = resolve_python_name("torch.strided");  // NB: kept for the process
    return constant(strided);
  }
  // Methods are bound lazily: the CALL that follows decides (tensor-method intrinsics or ops).
  PyObject* attr = PyObject_GetAttrString(tensor_type(), name.c_str());
  if (!attr) {
    PyErr_Clear();
    throw Unsupported("'Tensor' object has no attribute '" + name + "'");
  }
  PyOwned owned(attr);
  const bool is_property = !PyCallable_Check(attr) || Py_TYPE(attr) == &PyGetSetDescr_Type ||
                           Py_TYPE(attr) == &PyProperty_Type;
  if (is_property) {
    auto fam = family_of_tensor_attr(name);
    if (!fam) throw Unsupported("tensor attribute '" + name + "' is not supported");
    return call_family(*fam, {t}, {}, ("Tensor." + name).c_str());
  }
  SymValue m_v;
  m_v.kind = SymValue::Kind::Method;
  m_v.name = name;
  m_v.items.push_back(t);
  return m_v;
}

}  // namespace fastdyn::symbolic
