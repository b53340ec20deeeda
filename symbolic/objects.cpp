// symbolic/objects.cpp — objects of plain Python classes made in the trace (SymValue::Kind::Object).
//
// `cache = DynamicCache(config)` in a traced frame makes an Object: its class, and its attributes
// as symbolic values in its box, which the class's own __init__ (inlined) fills. Attribute reads
// follow Python's generic lookup (a data descriptor on the class, else the object's own
// attribute, else the class's: functions bind to the object, properties run their getter
// inlined, a __getattr__ runs on a miss); stores go to the box; super() inside its methods looks
// up past the method's class. Nothing of it exists for real during the trace: when the object
// outlives the graph (returned, stored somewhere the caller sees, live at a graph break) the
// transformed code builds it once, after the graph, with its final attributes
// (object_builder(): object.__new__ and the attributes in assignment order), and without running
// __init__ a second time. An object that never escapes is never built, as Dynamo does it.
//
// A class is plain (plain_class) when making and using one runs nothing the trace cannot see:
// object's __new__ and the type's call, an instance dict and no slots, no finalizer, no base class
// with a C layout of its own (dict, Exception ...), not an nn.Module (calls.cpp's own path). A
// __getattribute__ or __setattr__ of its own in Python (transformers' configs remap names, a
// strict dataclass validates every store) runs inlined at every read and store, and object's
// generic ones it reaches (super().__setattr__, object.__getattribute__(self, k)) work on the box;
// `obj.__dict__` is a dict of the trace sharing the box (never handed to run time), `del obj.x`
// removes from it, and a lookup that misses raises eager's AttributeError in the trace (hasattr
// and getattr's default catch it). copy.deepcopy makes such objects too (deep_copy.cpp).
// Anything else stays a call the trace does not follow.
#include <Python.h>

#include <algorithm>
#include <cstring>

#include "runtime/errors.h"
#include "symbolic/py_ops.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {

namespace {

PyObject* init_name() {
  static PyObject* key = PyUnicode_InternFromString("__init__");  // NB: kept for the process
  return key;
}

PyObject* object_init() {
  static PyObject* init = _PyType_Lookup(&PyBaseObject_Type, init_name());  // borrowed: object's own
  return init;
}

// object's own __getattribute__ / __setattr__ (borrowed).
PyObject* object_generic(const char* name) {
  static PyObject* getattribute = _PyType_Lookup(&PyBaseObject_Type, PyUnicode_InternFromString("__getattribute__"));  // NB: kept
  static PyObject* setattr = _PyType_Lookup(&PyBaseObject_Type, PyUnicode_InternFromString("__setattr__"));  // NB: kept
  return std::strcmp(name, "__setattr__") == 0 ? setattr : getattribute;
}

// The `__dict__` getset descriptor Python gives a class whose instances have a dict (the first
// such class in tp's MRO defines it; borrowed), or nullptr.
PyObject* object_dict_descriptor(PyTypeObject* tp) {
  static PyObject* key = PyUnicode_InternFromString("__dict__");  // NB: kept for the process
  PyObject* d = _PyType_Lookup(tp, key);
  return d && Py_IS_TYPE(d, &PyGetSetDescr_Type) ? d : nullptr;
}

// `name` in class `cls`'s own dict (borrowed), or nullptr. A static type's tp_dict is NULL in
// 3.12 (its dict is per interpreter): read through its __dict__ proxy; static types and their
// dicts live as long as the process, so the entry stays valid.
PyObject* own_entry(PyObject* cls, PyObject* name) {
  auto* tp = reinterpret_cast<PyTypeObject*>(cls);
  if ((tp->tp_flags & Py_TPFLAGS_HEAPTYPE) && tp->tp_dict) {
    PyObject* v = PyDict_GetItemWithError(tp->tp_dict, name);
    PyErr_Clear();
    return v;
  }
  PyOwned proxy(PyObject_GetAttrString(cls, "__dict__"));
  PyOwned v(proxy.p ? PyObject_GetItem(proxy.p, name) : nullptr);
  PyErr_Clear();
  return v.p;
}

// The class dict entry for `name` along tp's MRO, starting after class `after` (nullptr: from tp
// itself); *defining gets the class that holds it. Borrowed.
PyObject* mro_lookup(PyTypeObject* tp, PyObject* name, PyObject* after, PyObject** defining) {
  PyObject* mro = tp->tp_mro;
  if (!mro) return nullptr;
  bool started = after == nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    PyObject* cls = PyTuple_GET_ITEM(mro, i);
    if (!started) {
      started = cls == after;
      continue;
    }
    if (PyObject* v = own_entry(cls, name)) {
      if (defining) *defining = cls;
      return v;
    }
  }
  return nullptr;
}

// tp's own `dunder` in Python (a function, borrowed), or nullptr.
PyObject* python_function_dunder(PyTypeObject* tp, const char* dunder) {
  PyObject* f = python_dunder(tp, dunder);
  return f && PyFunction_Check(f) ? f : nullptr;
}

// Whether an attribute name (a key of an Object's box: a str unless stored through __dict__)
// is `name`.
bool key_is(const SymValue& key, const std::string& name) {
  return PyUnicode_Check(key.obj) && name == PyUnicode_AsUTF8(key.obj);
}

SymValue bound(PyObject* fn, const std::string& name, const SymValue& self) {
  SymValue m;
  m.kind = SymValue::Kind::BoundMethod;
  m.obj = Py_NewRef(fn);
  m.name = name;
  m.items.push_back(self);
  return m;
}

PyObject* build_object(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyType_Check(args[0]) || !PyDict_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "fastdyn: building an object of the trace takes a class and a dict");
    return nullptr;
  }
  PyOwned empty(PyTuple_New(0));
  PyObject* o = PyBaseObject_Type.tp_new(reinterpret_cast<PyTypeObject*>(args[0]), empty.p, nullptr);
  if (!o) return nullptr;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(args[1], &pos, &k, &v))
    if (PyObject_GenericSetAttr(o, k, v) < 0) {
      Py_DECREF(o);
      return nullptr;
    }
  return o;
}

}  // namespace

PyObject* object_builder() {
  static PyMethodDef def = {"__fd_build_object__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(build_object)),
                            METH_FASTCALL, "builds an object made in a fastdyn trace: (class, attributes)"};
  static PyObject* fn = PyCFunction_New(&def, nullptr);  // NB: kept for the process
  return fn;
}

bool Tracer::plain_class(PyObject* type) {
  if (!PyType_Check(type)) return false;
  auto* tp = reinterpret_cast<PyTypeObject*>(type);
  if (!(tp->tp_flags & Py_TPFLAGS_HEAPTYPE) || (tp->tp_flags & Py_TPFLAGS_IS_ABSTRACT)) return false;
  if (Py_TYPE(type)->tp_call != PyType_Type.tp_call || tp->tp_new != PyBaseObject_Type.tp_new) return false;
  // A __setattr__ or __getattribute__ of its own in Python is inlined at every store and read
  // (store_attr, load_attr), as eager runs it; object's reached from it (super()) is the box.
  if (tp->tp_setattro != PyObject_GenericSetAttr && !python_function_dunder(tp, "__setattr__")) return false;
  if (!has_standard_getattribute(tp) && !python_function_dunder(tp, "__getattribute__")) return false;
  if (python_dunder(tp, "__delattr__")) return false;
  // nn.Module's own __setattr__ files parameters, buffers and submodules: modules made in the
  // frame take calls.cpp's path (made for real when stateless, else not followed).
  static PyObject* module = resolve_python_name("torch.nn.Module");  // NB: kept for the process
  if (module && PyType_IsSubtype(tp, reinterpret_cast<PyTypeObject*>(module))) return false;
  if (tp->tp_dictoffset == 0 || tp->tp_finalize || tp->tp_del) return false;
  PyObject* mro = tp->tp_mro;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
    auto* c = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    if (c == &PyBaseObject_Type) continue;
    // A C base must add no layout of its own (typing.Generic does not; dict, Exception do).
    if (!(c->tp_flags & Py_TPFLAGS_HEAPTYPE) && c->tp_basicsize != PyBaseObject_Type.tp_basicsize) return false;
    static PyObject* slots_name = PyUnicode_InternFromString("__slots__");  // NB: kept for the process
    PyObject* slots = own_entry(reinterpret_cast<PyObject*>(c), slots_name);  // empty (the ABCs): no member
    if (slots && !(PyTuple_Check(slots) && PyTuple_GET_SIZE(slots) == 0)) return false;
  }
  return true;
}

SymValue Tracer::new_object(PyObject* type, std::vector<SymValue> args, std::vector<std::pair<std::string, SymValue>> kwargs) {
  SymValue self;
  self.kind = SymValue::Kind::Object;
  self.obj = Py_NewRef(type);
  self.box = std::make_shared<SymBox>();
  PyObject* defining = nullptr;
  PyObject* init = mro_lookup(reinterpret_cast<PyTypeObject*>(type), init_name(), nullptr, &defining);
  if (init == object_init()) {
    if (!args.empty() || !kwargs.empty()) throw Unsupported(describe(self) + ": object.__init__ takes no arguments");
    return self;
  }
  // Read through the class, guarded: the class may be given another __init__ later.
  SymValue fn = load_attr(constant(defining), "__init__");
  if (!fn.is_constant() || !PyFunction_Check(fn.obj)) throw Unsupported(describe(self) + ": its __init__ is not a Python function");
  SymValue r = call(bound(fn.obj, "__init__", self), std::move(args), std::move(kwargs));
  if (!r.is_constant() || r.obj != Py_None) throw Unsupported(describe(self) + ": __init__ returned " + describe(r));
  return self;
}

bool Tracer::object_lookup(const SymValue& self, const std::string& name, SymValue* out, PyObject* after) {
  auto* tp = reinterpret_cast<PyTypeObject*>(self.obj);
  if (!after && name == "__class__") {
    *out = constant(self.obj);
    return true;
  }
  if (name == "__dict__") {
    // The instance dict: a dict of the trace sharing the object's box, so that what is stored
    // through either is the other's. It stays in the trace (kObjectDict): built on its own, it
    // would not be the object's dict.
    if (after || !object_dict_descriptor(tp))
      throw Unsupported("__dict__ of " + describe(self) + " (its class's own)");
    SymValue d;
    d.kind = SymValue::Kind::Dict;
    d.box = self.box;
    d.name = kObjectDict;
    *out = d;
    return true;
  }
  PyOwned key(interned_name(name));
  PyObject* defining = nullptr;
  PyObject* found = mro_lookup(tp, key.p, after, &defining);
  // The class's value, read through the class (guarded as any class attribute is).
  auto class_value = [&] { return load_attr(constant(defining), name); };
  if (found && Py_TYPE(found)->tp_descr_set) {  // a data descriptor wins over the object's own
    if (!Py_IS_TYPE(found, &PyProperty_Type)) throw Unsupported(std::string("attribute '") + name + "' of " + describe(self) + " is a " + Py_TYPE(found)->tp_name);
    SymValue prop = class_value();
    PyOwned fget(PyObject_GetAttrString(prop.obj, "fget"));
    if (!fget.p || fget.p == Py_None) { PyErr_Clear(); throw Unsupported("property '" + name + "' of " + describe(self) + " has no getter"); }
    *out = call(constant(fget.p), {self}, {});
    return true;
  }
  if (!after)
    for (size_t i = 0; i < self.box->keys.size(); ++i)
      if (key_is(self.box->keys[i], name)) {
        *out = self.box->items[i];
        return true;
      }
  if (found) {
    if (found == object_init()) {  // super().__init__() reaching object's: does nothing
      SymValue m;
      m.kind = SymValue::Kind::BoundMethod;
      m.name = "__fd_object_init__";
      m.items.push_back(self);
      *out = m;
      return true;
    }
    if (found == object_generic("__getattribute__") || found == object_generic("__setattr__")) {
      // object's own lookup or store, reached past the class's (super().__setattr__(k, v)).
      SymValue m;
      m.kind = SymValue::Kind::BoundMethod;
      m.name = found == object_generic("__setattr__") ? "__fd_generic_setattr__" : "__fd_generic_getattr__";
      m.items.push_back(self);
      *out = m;
      return true;
    }
    if (PyFunction_Check(found)) {
      SymValue fn = class_value();
      if (!fn.is_constant() || !PyFunction_Check(fn.obj)) throw Unsupported("method '" + name + "' of " + describe(self));
      *out = bound(fn.obj, name, self);
      return true;
    }
    // A staticmethod gives its function; a classmethod binds to the object's class (not to the
    // class that defines it, which super() may have passed).
    if (Py_IS_TYPE(found, &PyStaticMethod_Type) || Py_IS_TYPE(found, &PyClassMethod_Type)) {
      PyOwned fn(PyObject_GetAttrString(found, "__func__"));
      if (!fn.p) { PyErr_Clear(); throw Unsupported("method '" + name + "' of " + describe(self)); }
      *out = Py_IS_TYPE(found, &PyStaticMethod_Type) ? constant(fn.p) : bound(fn.p, name, constant(self.obj));
      return true;
    }
    if (Py_TYPE(found)->tp_descr_get)  // any other descriptor runs code of its own
      throw Unsupported(std::string("attribute '") + name + "' of " + describe(self) + " is a " + Py_TYPE(found)->tp_name);
    *out = class_value();
    return true;
  }
  if (!after)
    if (PyObject* getattr = python_dunder(tp, "__getattr__")) {
      PyOwned n(PyUnicode_FromString(name.c_str()));
      *out = call(constant(getattr), {self, constant(n.p)}, {});
      return true;
    }
  return false;
}

// What a named tuple's class gives for `name` (no field): a method bound to it, a property's
// value, a class attribute (_fields, _field_defaults).
SymValue Tracer::named_tuple_class_attr(const SymValue& owner, const std::string& name) {
  PyOwned key(interned_name(name));
  PyObject* defining = nullptr;
  PyObject* found = mro_lookup(reinterpret_cast<PyTypeObject*>(owner.obj), key.p, nullptr, &defining);
  if (!found || !defining) throw Unsupported("attribute '" + name + "' of " + describe(owner));
  SymValue value = load_attr(constant(defining), name);  // guarded, as any class attribute is
  if (PyFunction_Check(found)) return bound(value.obj, name, owner);
  if (Py_IS_TYPE(found, &PyProperty_Type)) {
    PyOwned fget(PyObject_GetAttrString(found, "fget"));
    if (!fget.p || fget.p == Py_None) { PyErr_Clear(); throw Unsupported("property '" + name + "' of " + describe(owner) + " has no getter"); }
    return call(constant(fget.p), {owner}, {});
  }
  if (Py_TYPE(found)->tp_descr_get) throw Unsupported(std::string("attribute '") + name + "' of " + describe(owner) + " is a " + Py_TYPE(found)->tp_name);
  return value;
}

SymValue Tracer::object_attr(const SymValue& self, const std::string& name, PyObject* after) {
  SymValue out;
  if (!object_lookup(self, name, &out, after))  // eager's AttributeError, which a handler may catch
    throw Raised::no_attribute(reinterpret_cast<PyTypeObject*>(self.obj)->tp_name, name);
  return out;
}

bool Tracer::object_slot_call(PyObject* fn, const std::vector<SymValue>& args, SymValue* out) {
  if (args.empty() || args[0].kind != SymValue::Kind::Object || args.size() < 2 || !args[1].is_constant() || !PyUnicode_Check(args[1].obj))
    return false;
  const std::string name = PyUnicode_AsUTF8(args[1].obj);
  if (fn == object_generic("__setattr__") && args.size() == 3) {
    store_object_attr(args[0], name, args[2]);
    *out = constant(Py_None);
    return true;
  }
  if (fn == object_generic("__getattribute__") && args.size() == 2) {
    generic_lookup_ = true;
    *out = load_attr(args[0], name);
    return true;
  }
  return false;
}

// del self.name: object's __delattr__ (the class has no Python one: plain_class) on the box.
void Tracer::delete_object_attr(const SymValue& self, const std::string& name) {
  auto* tp = reinterpret_cast<PyTypeObject*>(self.obj);
  PyOwned key(interned_name(name));
  PyObject* found = mro_lookup(tp, key.p, nullptr, nullptr);
  if (found && Py_TYPE(found)->tp_descr_set) throw Unsupported("del of '" + name + "' of " + describe(self) + " through a " + Py_TYPE(found)->tp_name);
  std::vector<SymValue>& keys = self.box->keys;
  for (size_t i = 0; i < keys.size(); ++i)
    if (key_is(keys[i], name)) {
      keys.erase(keys.begin() + static_cast<std::ptrdiff_t>(i));
      self.box->items.erase(self.box->items.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  throw Unsupported("del of '" + name + "', which " + describe(self) + " lacks (AttributeError)");
}

void Tracer::store_object_attr(const SymValue& self, const std::string& name, const SymValue& value) {
  auto* tp = reinterpret_cast<PyTypeObject*>(self.obj);
  PyOwned key(interned_name(name));
  PyObject* found = mro_lookup(tp, key.p, nullptr, nullptr);
  if (found && Py_TYPE(found)->tp_descr_set) {
    if (!Py_IS_TYPE(found, &PyProperty_Type))
      throw Unsupported(std::string("assignment to '") + name + "' of " + describe(self) + " through a " + Py_TYPE(found)->tp_name);
    PyOwned fset(PyObject_GetAttrString(found, "fset"));
    if (!fset.p || fset.p == Py_None) { PyErr_Clear(); throw Unsupported("property '" + name + "' of " + describe(self) + " has no setter"); }
    call(constant(fset.p), {self, value}, {});
    return;
  }
  if (name == "__class__" || name == "__dict__") throw Unsupported("assignment to " + name + " of " + describe(self));
  std::vector<SymValue>& keys = self.box->keys;
  std::vector<SymValue>& items = self.box->items;
  size_t i = 0;
  while (i < keys.size() && !key_is(keys[i], name)) ++i;
  if (value.holds_box(self.box.get())) throw Unsupported("storing " + describe(value) + " in an attribute of itself (a cycle)");
  if (value.kind == SymValue::Kind::Iterator || value.kind == SymValue::Kind::Cell)
    throw Unsupported("storing a " + describe(value) + " in an attribute of " + describe(self));
  if (i < keys.size()) {
    items[i] = value;
    return;
  }
  keys.push_back(constant(key.p));
  items.push_back(value);
}

// ---- Plain list subclasses (transformers' LogitsProcessorList, StoppingCriteriaList): a List
// value tagged with its class. Everything a list does is list's own, so the trace's list (its
// items, appends, iteration, len) is exact; what the class adds (__call__, a property) is looked
// up on the class and inlined with the List as self.

bool Tracer::plain_list_subclass(PyObject* type) {
  if (!PyType_Check(type)) return false;
  auto* tp = reinterpret_cast<PyTypeObject*>(type);
  if (tp == &PyList_Type || !PyType_IsSubtype(tp, &PyList_Type) || !(tp->tp_flags & Py_TPFLAGS_HEAPTYPE)) return false;
  if (Py_TYPE(type)->tp_call != PyType_Type.tp_call || tp->tp_new != PyList_Type.tp_new || tp->tp_init != PyList_Type.tp_init)
    return false;
  if (tp->tp_setattro != PyObject_GenericSetAttr || !has_standard_getattribute(tp) || tp->tp_finalize || tp->tp_del) return false;
  static PyObject* list_dict = PyObject_GetAttrString(reinterpret_cast<PyObject*>(&PyList_Type), "__dict__");  // NB: kept
  static const char* const allowed[] = {"__doc__", "__module__", "__qualname__", "__dict__", "__weakref__"};
  PyObject* mro = tp->tp_mro;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
    auto* c = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    if (c == &PyList_Type || c == &PyBaseObject_Type) continue;
    if (!(c->tp_flags & Py_TPFLAGS_HEAPTYPE) || !c->tp_dict) return false;  // another C base (a layout of its own)
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(c->tp_dict, &pos, &k, &v)) {
      if (!PyUnicode_Check(k)) return false;
      if (std::any_of(std::begin(allowed), std::end(allowed), [&](const char* a) { return PyUnicode_CompareWithASCIIString(k, a) == 0; }))
        continue;
      if (std::strcmp(PyUnicode_AsUTF8(k), "__slots__") == 0) return false;
      const int mine = PySequence_Contains(list_dict, k);  // overrides something list does
      if (mine != 0) {
        PyErr_Clear();
        return false;
      }
    }
  }
  return true;
}

SymValue Tracer::new_list_subclass(PyObject* type, std::vector<SymValue> args, std::vector<std::pair<std::string, SymValue>> kwargs) {
  if (!kwargs.empty() || args.size() > 1) throw Unsupported(std::string(reinterpret_cast<PyTypeObject*>(type)->tp_name) + "() takes at most one positional argument");
  SymValue v = SymValue::list(args.empty() ? std::vector<SymValue>{} : remaining(make_iterator(args[0])));
  v.obj = Py_NewRef(type);
  return v;
}

bool Tracer::list_subclass_member(const SymValue& self, const std::string& name, SymValue* out) {
  auto* tp = reinterpret_cast<PyTypeObject*>(self.obj);
  PyOwned key(interned_name(name));
  PyObject* defining = nullptr;
  PyObject* found = mro_lookup(tp, key.p, nullptr, &defining);
  // The caller's list: what the lookup found (or that it found nothing) holds while its class
  // keeps it and its own dict does not shadow it (a list's is empty when it is read: wrap()).
  if (self.source) guard_type_attr(self.source, name, found);
  if (name == "__class__") {
    *out = constant(self.obj);
    return true;
  }
  if (!found || defining == reinterpret_cast<PyObject*>(&PyList_Type) || defining == reinterpret_cast<PyObject*>(&PyBaseObject_Type))
    return false;
  return object_lookup(self, name, out);
}

bool Tracer::unwind_to(size_t depth) {
  for (size_t k = depth; k < frames_.size(); ++k) {
    const FrameState& f = *frames_[k];
    if (!enclosing_handlers(f.code, f.insts[f.pc].index).empty()) return false;
  }
  frames_.resize(depth);
  return true;
}

std::optional<std::vector<SymValue>> Tracer::sequence_items(const SymValue& v) {
  static PyObject* sequence_iter = resolve_python_name("collections.abc.Sequence.__iter__");  // NB: kept
  if (!sequence_iter || python_dunder(reinterpret_cast<PyTypeObject*>(v.obj), "__iter__") != sequence_iter) return std::nullopt;
  constexpr int kMaxItems = 4096;
  std::vector<SymValue> items;
  for (int i = 0;; ++i) {
    if (i > kMaxItems) throw Unsupported("iterating " + describe(v) + ": more than " + std::to_string(kMaxItems) + " items");
    const size_t depth = frames_.size();
    PyOwned index(PyLong_FromLong(i));
    try {
      items.push_back(subscript(v, constant(index.p)));
    } catch (const Raised& r) {
      // Sequence.__iter__'s `except IndexError` catches it only when no block of the inlined
      // calls between (a try, a with) would see it first.
      if (!unwind_to(depth)) throw Unsupported(std::string(r.what()) + " inside a try or with block");
      if (!PyObject_IsSubclass(r.type, PyExc_IndexError)) throw Unsupported(r.what());
      return items;
    }
  }
}

}  // namespace fastdyn::symbolic
