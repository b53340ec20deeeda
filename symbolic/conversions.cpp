// symbolic/conversions.cpp — between Python objects, symbolic values and the op table's call
// arguments: wrapping inputs (with their guards), turning symbolic values into CallArgs, and
// materialising constants.
#include <torch/csrc/Device.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Layout.h>
#include <torch/csrc/MemoryFormat.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>

#include "runtime/tensor_check.h"
#include "runtime/errors.h"
#include "symbolic/py_ops.h"
#include "symbolic/tracer.h"
#include "codegen/shapes/propagate.h"

#include <algorithm>

namespace fastdyn::symbolic {
namespace {

bool is_int(PyObject* o) { return PyLong_CheckExact(o); }
bool is_plain_constant(PyObject* o) {
  return o == Py_None || o == Py_Ellipsis || PyBool_Check(o) || PyLong_CheckExact(o) ||
         PyFloat_CheckExact(o) || PyUnicode_CheckExact(o) || THPDtype_Check(o) ||
         THPDevice_Check(o) || THPSize_Check(o) || PyComplex_CheckExact(o);
}

// A tensor subclass whose torch calls eager passes through __torch_function__: one of its own,
// or torch.Tensor's, which makes results of the subclass too. nn.Parameter's is disabled: its
// results are plain tensors, as the graph's are.
bool sees_torch_calls(PyTypeObject* tp) {
  static PyObject* name = PyUnicode_InternFromString("__torch_function__");  // NB: kept for the process
  static PyObject* disabled = resolve_python_name("torch._C._disabled_torch_function_impl");
  if (tp == reinterpret_cast<PyTypeObject*>(tensor_type())) return false;
  PyObject* impl = _PyType_Lookup(tp, name);
  return impl && impl != disabled;
}

// A plain constant, or a tuple or frozenset of plain values: what a guard compares in C by value.
bool is_plain_deep(PyObject* o, int depth = 0) {
  if (is_plain_constant(o)) return true;
  if (depth > 4 || !(PyTuple_CheckExact(o) || PyFrozenSet_CheckExact(o)) || PyObject_Length(o) > 16) return false;
  PyOwned items(PySequence_Tuple(o));
  if (!items.p) { PyErr_Clear(); return false; }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items.p); ++i)
    if (!is_plain_deep(PyTuple_GET_ITEM(items.p, i), depth + 1)) return false;
  return true;
}

// A dict key that guards look up in C without running Python: a plain value, or an object
// hashed and compared by identity (a plain instance, a function, a class).
bool comparable_key(PyObject* o) {
  PyTypeObject* tp = Py_TYPE(o);
  return is_plain_deep(o) || PyType_Check(o) ||
         (tp->tp_hash == PyBaseObject_Type.tp_hash && tp->tp_richcompare == PyBaseObject_Type.tp_richcompare);
}

// Whether an object has no attribute of its own (an empty or absent instance dict).
bool instance_dict_empty(PyObject* o) {
  PyOwned d(PyObject_GenericGetDict(o, nullptr));
  if (!d.p) {
    PyErr_Clear();
    return true;
  }
  return PyDict_Check(d.p) && PyDict_GET_SIZE(d.p) == 0;
}

// A container whose contents the trace could read and no per-item guard follows: dicts and sets
// of other kinds, list subclasses, bytearrays, deques.
bool is_mutable_container(PyObject* o) {
  static PyObject* deque = resolve_python_name("collections.deque");  // NB: kept for the process
  return PyDict_Check(o) || PySet_Check(o) || PyList_Check(o) || PyByteArray_Check(o) ||
         (deque && PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(deque)));
}

// A copy of a container down to its leaves, for an Equals guard to compare against
// (runtime::strict_equal): dicts (any dict type, as a plain dict in the dict's own order), lists,
// sets and tuples are copied; other values are kept (compared by value if ints, strings...,
// else by identity). New reference, or nullptr where no snapshot can serve: a tensor inside
// (read it through a path instead), a deque, bytearray or list subclass, more than `budget`
// entries, or nesting deeper than 6.
PyObject* snapshot_copy(PyObject* o, int depth, int& budget) {
  if (--budget < 0 || depth > 6 || runtime::is_tensor_object(o)) return nullptr;
  if (PyDict_Check(o)) {
    PyOwned out(PyDict_New());
    PyOwned keys(PySequence_List(o));  // the dict's own order (an OrderedDict's, too)
    if (!keys.p) return nullptr;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.p); ++i) {
      PyObject* k = PyList_GET_ITEM(keys.p, i);
      PyObject* v = PyDict_GetItemWithError(o, k);
      PyOwned vc(v ? snapshot_copy(v, depth + 1, budget) : nullptr);
      if (!vc.p || PyDict_SetItem(out.p, k, vc.p) < 0) return nullptr;
    }
    return Py_NewRef(out.p);
  }
  if (PyList_CheckExact(o) || PyTuple_CheckExact(o)) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(o);
    PyOwned out(PyList_CheckExact(o) ? PyList_New(n) : PyTuple_New(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject* c = snapshot_copy(PySequence_Fast_GET_ITEM(o, i), depth + 1, budget);
      if (!c) return nullptr;
      if (PyList_CheckExact(o)) PyList_SET_ITEM(out.p, i, c);
      else PyTuple_SET_ITEM(out.p, i, c);
    }
    return Py_NewRef(out.p);
  }
  if (PySet_CheckExact(o) || PyFrozenSet_CheckExact(o)) {
    PyObject* key;
    Py_ssize_t pos = 0;
    Py_hash_t hash;
    while (_PySet_NextEntry(o, &pos, &key, &hash))
      if (runtime::is_tensor_object(key) || is_mutable_container(key)) return nullptr;  // members stay as they are
    budget -= static_cast<int>(PySet_GET_SIZE(o));
    return budget < 0 ? nullptr : PySet_CheckExact(o) ? PySet_New(o) : Py_NewRef(o);
  }
  if (is_mutable_container(o) || PyTuple_Check(o)) return nullptr;  // namedtuples of containers, too
  return Py_NewRef(o);
}
codegen::TensorMeta meta_of(const at::Tensor& t) {
  codegen::TensorMeta m;
  m.dtype = t.scalar_type();
  m.device = t.device();
  m.sizes = t.sizes().vec();
  m.strides = t.strides().vec();
  m.storage_offset = t.storage_offset();
  m.requires_grad = t.requires_grad();
  return m;
}

// New reference to torch.return_types.<family> (the type eager returns), or nullptr.
PyObject* named_tuple_type(codegen::Family fam) {
  return resolve_python_name(std::string("torch.return_types.") + codegen::family_name(fam));
}

// A plain object of a Python class: a heap type whose bases are Python classes up to object
// (or up to a built-in exception class),
// made by `type` or ABCMeta (no enum or other metaclass whose instances are singletons), not an
// nn.Module. Its state is what the trace reads through its attributes, each guarded on its own.
// transformers' ModelOutput (an OrderedDict whose items mirror its attributes) counts as one: its
// attributes are guarded one by one, and dict methods read from it pin it (attributes.cpp).
bool is_plain_instance(PyObject* o) {
  PyTypeObject* tp = Py_TYPE(o);
  if (!(tp->tp_flags & Py_TPFLAGS_HEAPTYPE) || PyType_Check(o)) return false;
  if (is_model_output(reinterpret_cast<PyObject*>(tp))) return true;
  static PyObject* abc_meta = resolve_python_name("abc.ABCMeta");  // NB: kept for the process
  PyObject* meta = reinterpret_cast<PyObject*>(Py_TYPE(tp));
  if (meta != reinterpret_cast<PyObject*>(&PyType_Type) && meta != abc_meta) return false;
  // Classes made by a class statement share CPython's subtype_dealloc; C types made from specs
  // (functools.partial, say) are heap types too, with their own state: learn it from one class.
  static destructor class_dealloc = [] {
    PyOwned cls(PyObject_CallFunction(reinterpret_cast<PyObject*>(&PyType_Type), "s(){}", "fastdyn_probe"));
    return cls.p ? reinterpret_cast<PyTypeObject*>(cls.p)->tp_dealloc : nullptr;
  }();
  PyObject* mro = tp->tp_mro;
  if (!class_dealloc || !mro || !PyTuple_Check(mro)) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    auto* base = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    // Built-in exception classes keep their state (args, traceback, cause, notes) in C fields
    // reached through descriptors, each read guarded like any attribute: an exception made per
    // call is one more plain object, not a new identity to compile for.
    const bool builtin_exception = !(base->tp_flags & Py_TPFLAGS_HEAPTYPE) &&
                                   PyType_IsSubtype(base, reinterpret_cast<PyTypeObject*>(PyExc_BaseException));
    if (base != &PyBaseObject_Type && base->tp_dealloc != class_dealloc && !builtin_exception) return false;
  }
  return !PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(module_type()));
}

}  // namespace

PyObject* module_type() {
  static PyObject* t = resolve_python_name("torch.nn.Module");  // NB: kept for the process
  return t;
}

std::string py_repr(PyObject* o) {
  // Only types whose repr is C code with no user hook: a user class's __repr__ (or its
  // metaclass's) would run once more than eager runs it, for a message.
  PyTypeObject* tp = Py_TYPE(o);
  const bool c_repr = !(tp->tp_flags & Py_TPFLAGS_HEAPTYPE) || PyModule_CheckExact(o) || PyFunction_Check(o) ||
                      (PyType_Check(o) && !(Py_TYPE(o)->tp_flags & Py_TPFLAGS_HEAPTYPE));
  if (!c_repr || (PyTuple_Check(o) && !PyTuple_CheckExact(o))) {
    if (PyType_Check(o)) return std::string("<class '") + reinterpret_cast<PyTypeObject*>(o)->tp_name + "'>";
    return std::string("<") + tp->tp_name + " object>";
  }
  if ((PyTuple_CheckExact(o) || PyList_CheckExact(o) || PyDict_CheckExact(o) || PyAnySet_CheckExact(o)) && !is_plain_value(o) &&
      PyObject_Length(o) > 0)
    return std::string("<") + tp->tp_name + " of " + std::to_string(PyObject_Length(o)) + " items>";  // items may be user objects
  PyObject* r = PyObject_Repr(o);
  if (!r) { PyErr_Clear(); return "<object>"; }
  const char* s = PyUnicode_AsUTF8(r);
  std::string out = s ? s : "<object>";
  Py_DECREF(r);
  if (out.size() > 60) out = out.substr(0, 57) + "...";
  return out;
}

std::string describe(const SymValue& v) {
  switch (v.kind) {
    case SymValue::Kind::Null: return "NULL";
    case SymValue::Kind::Constant: return py_repr(v.obj);
    case SymValue::Kind::Unread: return py_repr(v.obj);
    case SymValue::Kind::Tensor: return "Tensor";
    case SymValue::Kind::Tuple: return "tuple";
    case SymValue::Kind::List: return v.obj ? reinterpret_cast<PyTypeObject*>(v.obj)->tp_name : "list";
    case SymValue::Kind::Slice: return "slice";
    case SymValue::Kind::Method: return "Tensor." + v.name;
    case SymValue::Kind::NamedTuple: return "named tuple";
    case SymValue::Kind::Dict: return "dict";
    case SymValue::Kind::Set: return "set";
    case SymValue::Kind::Iterator: return "iterator";
    case SymValue::Kind::Function: return "function made in the frame";
    case SymValue::Kind::Cell: return "cell";
    case SymValue::Kind::BoundMethod: return "method " + v.name;
    case SymValue::Kind::Record: return std::string(reinterpret_cast<PyTypeObject*>(v.obj)->tp_name) + " made in the frame";
    case SymValue::Kind::Object: return std::string(reinterpret_cast<PyTypeObject*>(v.obj)->tp_name) + " object made in the frame";
  }
  return "?";
}

void Tracer::pin(const SymValue& v) const {
  using K = SymValue::Kind;
  if (v.kind == K::Constant) {
    auto it = type_guarded_.find(v.obj);
    if (it == type_guarded_.end()) return;
    GuardSpec g;
    g.source = it->second;  // the other paths to it are tied to this one by their alias guards
    g.kind = GuardKind::IdIs;
    g.obj = Py_NewRef(v.obj);
    result_.guards.push_back(std::move(g));
    return;
  }
  if (v.kind == K::Tensor || v.kind == K::Null) return;
  for (const SymValue& i : v.items) pin(i);
  if (v.box) {
    for (const SymValue& i : v.box->items) pin(i);
    for (const SymValue& k : v.box->keys) pin(k);
  }
}

void Tracer::guard_class_attr(const SymValue& owner, const std::string& name, PyObject* found) {
  if (!owner.source || !owner.obj) return;
  PyTypeObject* tp = Py_TYPE(owner.obj);
  // A builtin type (dict, int, ...) cannot change, and its instances have no dict to shadow with.
  if ((tp->tp_flags & Py_TPFLAGS_IMMUTABLETYPE) && !_PyObject_GetDictPtr(owner.obj)) return;
  guard_type_attr(owner.source, name, found);
}

void Tracer::guard_type_attr(const SourcePtr& source, const std::string& name, PyObject* found) {
  GuardSpec g;
  g.source = source;
  g.kind = GuardKind::TypeAttr;
  g.obj = Py_XNewRef(found);
  g.name = name;
  result_.guards.push_back(std::move(g));
}

const codegen::TensorMeta& Tracer::read_sizes(const SymValue& v, int64_t dim) {
  codegen::shapes::pin_value(result_.graph, v.tensor, dim, where() + ": Python code reads the tensor's sizes");
  return meta(v);
}

SymValue Tracer::symbolic_shape(const SymValue& t) {
  const codegen::TensorMeta& m = meta(t);
  std::vector<SymValue> items;
  for (size_t d = 0; d < m.sizes.size(); ++d) {
    PyOwned n(PyLong_FromLongLong(m.sizes[d]));
    SymValue item = constant(n.p);
    if (m.symbolic() && !m.sym_sizes[d].is_constant())
      item.size = std::make_shared<const codegen::shapes::SizeExpr>(m.sym_sizes[d]);
    items.push_back(std::move(item));
  }
  SymValue shape = SymValue::tuple(std::move(items));
  shape.torch_size = true;
  return shape;
}

namespace {

// A dim that varied had `size` before: a size that moved (ShapeHistory::moved). True when an input
// this trace saw first was already read with that size, so its dim missed the symbol.
bool note_moved(ShapeHistory& h, int64_t size, int trace) {
  if (!h.moved.insert(size).second || trace == 0) return false;
  for (const auto& [name, f] : h.first)
    if (f.trace == trace && std::count(f.sizes.begin(), f.sizes.end(), size)) return true;
  return false;
}

}  // namespace

std::vector<int64_t> Tracer::dynamic_dims(PyObject* obj, const at::Tensor& t, const std::string& name) {
  std::set<int64_t> dims;
  if (frame_.dynamic == DynamicMode::Never) return {};
  // Parameters keep static sizes under dynamic=True (a model's weights do not vary; their sizes
  // as symbols would only cost guards and pins). mark_dynamic still applies to them.
  static PyObject* parameter_type = resolve_python_name("torch.nn.Parameter");
  const bool parameter = parameter_type && PyObject_TypeCheck(obj, reinterpret_cast<PyTypeObject*>(parameter_type));
  if (frame_.dynamic == DynamicMode::Always && !parameter)
    for (int64_t d = 0; d < t.dim(); ++d) dims.insert(d);
  // fastdyn.mark_dynamic(t, dim): a set of dims in the tensor's __dict__
  static PyObject* marked_name = PyUnicode_InternFromString("_fastdyn_dynamic_dims");
  PyObject** dict = _PyObject_GetDictPtr(obj);
  if (dict && *dict) {
    PyObject* marked = PyDict_GetItemWithError(*dict, marked_name);  // borrowed
    if (marked && PyAnySet_Check(marked)) {
      PyOwned it(PyObject_GetIter(marked));
      while (it.p) {
        PyOwned item(PyIter_Next(it.p));
        if (!item.p) break;
        const long long d = PyLong_AsLongLong(item.p);
        if (d == -1 && PyErr_Occurred()) break;
        dims.insert(d < 0 ? d + t.dim() : d);
      }
    }
    PyErr_Clear();
  }
  if (frame_.shapes) {  // automatic dynamic: dims seen with another size than at the first sight
    ShapeHistory& h = *frame_.shapes;
    const int trace = h.traces - 1;
    const std::vector<int64_t> now = t.sizes().vec();
    auto [first, fresh] = h.first.emplace(name, ShapeHistory::First{now, trace});
    const std::vector<int64_t>& seen = first->second.sizes;
    std::set<int64_t>& varying = h.varying[name];
    if (!fresh && seen.size() == now.size())
      for (size_t d = 0; d < now.size(); ++d)
        if (seen[d] != now[d] && varying.insert(static_cast<int64_t>(d)).second && seen[d] > 1 && note_moved(h, seen[d], trace))
          result_.moved_after_read = true;
    if (frame_.dynamic == DynamicMode::Auto) {
      dims.insert(varying.begin(), varying.end());
      // A size that moved: an input no earlier trace of this code saw, with the size another
      // input's dim had before it varied, gets a symbol there from its first trace on. A prompt's
      // length that became a KV cache's at the first decode step is the case: the static entry
      // it would otherwise get serves that one step, and the next length traces again.
      if (first->second.trace > 0 && !parameter && !h.moved.empty())
        for (size_t d = 0; d < seen.size() && d < now.size(); ++d)
          if (h.moved.count(seen[d])) dims.insert(static_cast<int64_t>(d));
    }
  }
  return {dims.begin(), dims.end()};
}

void Tracer::add_guard(const SourcePtr& source, GuardKind kind, PyObject* obj) {
  GuardSpec g;
  g.source = source;
  g.kind = kind;
  g.obj = Py_NewRef(obj);
  result_.guards.push_back(std::move(g));
}

namespace {

// A namedtuple class whose instances are plain tuples with names: tuple's own indexing and
// iteration, and each of its _fields read by the getter namedtuple made for it.
bool is_plain_namedtuple(PyTypeObject* tp) {
  PyObject* type = reinterpret_cast<PyObject*>(tp);
  if (!is_namedtuple_type(type)) return false;
  // NB: by the methods the class resolves, not by slot pointers: a heap type's sq_item is the
  // generic slot that calls __getitem__ even when __getitem__ is tuple's own.
  static PyObject* const tuple_methods[] = {PyUnicode_InternFromString("__getitem__"), PyUnicode_InternFromString("__iter__"),
                                            PyUnicode_InternFromString("__len__")};  // NB: kept for the process
  for (PyObject* name : tuple_methods)
    if (_PyType_Lookup(tp, name) != _PyType_Lookup(&PyTuple_Type, name)) return false;
  PyOwned fields(PyObject_GetAttrString(type, "_fields"));
  if (!fields.p || !PyTuple_Check(fields.p)) {
    PyErr_Clear();
    return false;
  }
  // NB: by the type collections uses, not its name ("_collections._tuplegetter" on 3.11,
  // "collections._tuplegetter" on 3.12).
  static PyObject* const getter = resolve_python_name("collections._tuplegetter");  // NB: kept for the process
  if (!getter) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields.p); ++i) {
    PyObject* descr = _PyType_Lookup(tp, PyTuple_GET_ITEM(fields.p, i));
    if (!descr || reinterpret_cast<PyObject*>(Py_TYPE(descr)) != getter) return false;
  }
  return true;
}

}  // namespace

// A dict with keys, all of them tensors (hashed by identity), or a collections.defaultdict whose
// keys, if any, are all tensors.
static bool keyed_by_tensors(PyObject* obj) {
  const bool is_defaultdict = Py_TYPE(obj) == defaultdict_type();
  if (!is_defaultdict && !(PyDict_CheckExact(obj) && PyDict_GET_SIZE(obj) > 0)) return false;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(obj, &pos, &k, &v))
    if (!THPVariable_Check(k)) return false;
  return true;
}

bool plain_scalar(PyObject* o) {
  return PyFloat_CheckExact(o) || PyLong_CheckExact(o) || PyBool_Check(o) || PyUnicode_CheckExact(o) ||
         PyBytes_CheckExact(o) || PyComplex_CheckExact(o) || o == Py_None;
}

void Tracer::read_unread(SymValue& v) {
  const SymValue u = v;
  v = wrap(u.obj, u.source);
  // The slots still holding it (a number pushed unread: interpreter.cpp's load_fast) take the
  // wrapped value: it is wrapped, and guarded, once.
  for (auto& l : frames_.front()->locals)
    if (l && l->kind == SymValue::Kind::Unread && l->source == u.source) *l = v;
}

SymValue Tracer::wrap(PyObject* obj, const SourcePtr& source) {
  auto guard = [&](GuardKind kind) { add_guard(source, kind, obj); };
  if (runtime::is_tensor_object(obj)) {
    auto it = tensor_inputs_.find(obj);
    if (it != tensor_inputs_.end()) {
      // One tensor reached by a second path: guard that it is still the same object.
      guard(GuardKind::Tensor);
      SymValue v = SymValue::of_tensor(it->second);
      v.source = source;
      return v;
    }
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (t.is_sparse() || t.layout() != c10::kStrided)
      throw Unsupported("input " + source_name(*source) + " is not a strided tensor");
    if (t.unsafeGetTensorImpl()->is_python_dispatch() || t.is_nested())
      throw Unsupported("input " + source_name(*source) + " is a tensor subclass with custom dispatch");
    if (sees_torch_calls(Py_TYPE(obj)))
      throw Unsupported("input " + source_name(*source) + " is a " + Py_TYPE(obj)->tp_name + ", a tensor subclass with __torch_function__");
    codegen::ValueId id = result_.graph.add_input(meta_of(t));
    result_.input_sources.push_back(source);
    for (int64_t d : dynamic_dims(obj, t, source_name(*source)))
      codegen::shapes::make_dynamic(result_.graph, result_.graph.inputs.size() - 1, d);
    // Another input in the same memory (a view passed next to its base): capture must know.
    if (t.has_storage())
      for (const auto& [other, other_id] : tensor_inputs_) {
        const at::Tensor& o = THPVariable_Unpack(other);
        if (o.has_storage() && o.storage().unsafeGetStorageImpl() == t.storage().unsafeGetStorageImpl()) {
          // NB: the first input of that storage, which `other` may alias in turn (x, x[0], x.t():
          // x.t() against x[0] must name x too, difftest seed 29273)
          codegen::ValueId first = other_id;
          for (const auto& [alias, root] : ctx_.input_storage_alias)
            if (alias == other_id) first = root;
          ctx_.input_storage_alias.emplace_back(id, first);
          break;
        }
      }
    // Leaves that require grad (parameters), or views of one: eager refuses in-place writes into
    // them in grad mode, and so does capture (the op then raises eagerly, on its own line).
    if (t.requires_grad() && (t.is_leaf() || (t.is_view() && t._base().is_leaf()))) ctx_.grad_leaf_inputs.push_back(id);
    tensor_inputs_.emplace(obj, id);
    guard(GuardKind::Tensor);
    SymValue v = SymValue::of_tensor(id);
    v.source = source;
    v.obj = Py_NewRef(obj);
    return v;
  }
  if (is_plain_constant(obj)) {
    guard(THPDtype_Check(obj) || obj == Py_None || obj == Py_Ellipsis ? GuardKind::IdIs : GuardKind::Equals);
    return SymValue::constant(obj, source);
  }
  // Lists and dicts are wrapped item by item: a bound on their nesting keeps one that holds
  // itself (x.append(x)) from recursing without end.
  struct Depth {
    int& d;
    explicit Depth(int& depth) : d(depth) { ++d; }
    ~Depth() { --d; }
  } depth(wrap_depth_);
  // A plain list subclass (objects.cpp) with nothing in its own __dict__ is a list of the trace
  // tagged with its class.
  const bool list_like = PyList_CheckExact(obj) || (PyList_Check(obj) && plain_list_subclass(reinterpret_cast<PyObject*>(Py_TYPE(obj))) &&
                                                    instance_dict_empty(obj));
  if ((list_like || PyDict_CheckExact(obj)) && wrap_depth_ > 16)
    throw Unsupported(source_name(*source) + " nests lists or dicts deeper than 16 (or holds itself)");
  if (list_like && PyList_GET_SIZE(obj) > 256)  // a guard and a value per item: too many
    throw Unsupported(source_name(*source) + " is a list of " + std::to_string(PyList_GET_SIZE(obj)) + " items");
  if (list_like || PyDict_CheckExact(obj) || PySet_CheckExact(obj)) {
    // A list, dict or set the trace has mutated, read again through another path: the same box
    // (the guards hold both paths to one object, guard_builder.cpp).
    auto m = mutated_visible_.find(obj);
    if (m != mutated_visible_.end()) {
      guard(list_like ? GuardKind::TypeAndLen : PySet_CheckExact(obj) ? GuardKind::IdIs : GuardKind::DictKeys);
      SymValue v = m->second;
      v.source = source;
      return v;
    }
  }
  if (list_like || PyDict_CheckExact(obj) || PyODict_CheckExact(obj) || PySet_CheckExact(obj)) {
    // Read again through the same path (a global read twice, self.cache twice): the same box, so
    // that a mutation through either read is one object's (its guards are the first read's).
    auto first = visible_value_.find(obj);
    if (first != visible_value_.end() && source_name(*first->second.source) == source_name(*source)) return first->second;
  }
  auto visible = [&](SymValue v) {  // a list or dict the caller passed, as read through `source`
    visible_boxes_[obj].push_back(v.box.get());
    visible_object_[v.box.get()] = obj;
    v.source = source;
    visible_value_.emplace(obj, v);
    return v;
  };
  if (list_like) {
    // A list the caller passed: its items are guarded one by one; the source marks it as
    // visible to the caller (a mutation is replayed on it: mutate_visible).
    guard(GuardKind::TypeAndLen);
    std::vector<SymValue> items;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(obj); ++i) {
      auto item_src = std::make_shared<Source>();
      item_src->kind = Source::Kind::Item;
      item_src->index = static_cast<int>(i);
      item_src->parent = source;
      if (unread_items_) {  // a continuation's arguments: wrapped at their first read (Tracer::local)
        SymValue u = SymValue::constant(PyList_GET_ITEM(obj, i), item_src);
        u.kind = SymValue::Kind::Unread;
        items.push_back(std::move(u));
      } else {
        items.push_back(wrap(PyList_GET_ITEM(obj, i), item_src));
      }
    }
    SymValue v = SymValue::list(std::move(items));
    if (!PyList_CheckExact(obj)) v.obj = Py_NewRef(reinterpret_cast<PyObject*>(Py_TYPE(obj)));
    return visible(std::move(v));
  }
  if ((PyDict_CheckExact(obj) || PyODict_CheckExact(obj)) && PyDict_GET_SIZE(obj) <= 64) {
    // A dict the caller passed (**kwargs, a cache keyed by layer): each value guarded under its
    // key, the keys in their order (iterating it unrolls that order).
    PyObject *k, *val;
    Py_ssize_t pos = 0;
    bool keys_ok = true;
    while (keys_ok && PyDict_Next(obj, &pos, &k, &val)) keys_ok = comparable_key(k);
    if (keys_ok) {
      guard(GuardKind::DictKeys);
      SymValue v = SymValue::boxed(SymValue::Kind::Dict);
      if (PyODict_CheckExact(obj)) v.obj = Py_NewRef(reinterpret_cast<PyObject*>(&PyODict_Type));
      // In iteration order: an OrderedDict's is its own list (move_to_end), not its dict's.
      PyOwned keys(PySequence_List(obj));
      if (!keys.p) { PyErr_Clear(); throw Unsupported(source_name(*source) + ": listing its keys raised"); }
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.p); ++i) {
        k = PyList_GET_ITEM(keys.p, i);
        val = PyDict_GetItemWithError(obj, k);
        if (!val) { PyErr_Clear(); throw Unsupported(source_name(*source) + ": a key vanished while read"); }
        auto item_src = std::make_shared<Source>();
        item_src->kind = Source::Kind::DictItem;
        if (PyUnicode_CheckExact(k)) {
          item_src->name = PyUnicode_AsUTF8(k);
        } else {
          item_src->name = py_repr(k);
          item_src->object = Py_NewRef(k);
        }
        item_src->parent = source;
        v.box->keys.push_back(SymValue::constant(k));
        v.box->items.push_back(wrap(val, item_src));
      }
      return visible(std::move(v));
    }
  }
  if (PySet_CheckExact(obj)) {
    // A set the caller passed, of items that compare in C: its contents guarded against a
    // snapshot, and the trace works on a private copy, as on a set made in the trace; each
    // mutating call is replayed on the caller's set after the graph (container_method).
    int budget = 256;
    PyOwned snapshot(snapshot_copy(obj, 0, budget));
    bool comparable = snapshot.p != nullptr;
    PyObject* key;
    Py_hash_t hash;
    Py_ssize_t pos = 0;
    while (comparable && _PySet_NextEntry(obj, &pos, &key, &hash)) comparable = compares_in_c(key);
    if (!snapshot.p) PyErr_Clear();
    if (comparable) {
      guard(GuardKind::TypeIs);
      add_guard(source, GuardKind::Equals, snapshot.p);
      PyOwned copy(PySet_New(snapshot.p));  // the trace's own (the guard keeps the snapshot)
      if (!copy.p) { PyErr_Clear(); throw Unsupported(source_name(*source) + ": copying the set raised"); }
      return visible(set_value(copy.p));
    }
  }
  // A dict or defaultdict keyed by tensors only (an optimizer's `state`, keyed by its
  // parameters): like a plain instance, its type and alias slot; the trace reads it by tensor
  // keys (Tracer::tensor_keyed_item, each item guarded under a weakly held key), and anything
  // else it folds on the dict itself pins its identity (pin()).
  if (keyed_by_tensors(obj)) {
    guard(GuardKind::Instance);
    type_guarded_.emplace(obj, source);
    return SymValue::constant(obj, source);
  }
  // A dict of another type (OrderedDict, a registry subclass), size or kind of key, a set...:
  // the trace may fold .get, `in` and iteration on it, so its contents are guarded against a
  // snapshot (in their order), and its identity, since the code may hand the object on.
  // (transformers' ModelOutput, an OrderedDict, is a plain instance: below.)
  if (is_mutable_container(obj) && !is_model_output(reinterpret_cast<PyObject*>(Py_TYPE(obj)))) {
    int budget = 256;
    PyOwned snapshot(snapshot_copy(obj, 0, budget));
    if (!snapshot.p) {
      PyErr_Clear();
      throw Unsupported(source_name(*source) + " is a " + Py_TYPE(obj)->tp_name + " whose contents no guard can follow");
    }
    guard(GuardKind::IdIs);
    add_guard(source, GuardKind::Equals, snapshot.p);
    return SymValue::constant(obj, source);
  }
  if (PyTuple_CheckExact(obj)) {
    // Tuples of constants are constants; a tuple holding tensors is a tuple of wrapped items.
    bool all_plain = true;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); ++i)
      all_plain = all_plain && is_plain_constant(PyTuple_GET_ITEM(obj, i));
    if (all_plain) {
      guard(GuardKind::Equals);
      return SymValue::constant(obj, source);
    }
    guard(GuardKind::TypeAndLen);  // items are guarded one by one below
    std::vector<SymValue> items;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); ++i) {
      auto item_src = std::make_shared<Source>();
      item_src->kind = Source::Kind::Item;
      item_src->index = static_cast<int>(i);
      item_src->parent = source;
      items.push_back(wrap(PyTuple_GET_ITEM(obj, i), item_src));
    }
    SymValue v = SymValue::tuple(std::move(items));
    v.source = source;
    return v;
  }
  // A namedtuple (a model's inputs or outputs handed on): its exact type, then its fields one by
  // one, like a tuple's items; it stays a namedtuple in the trace (fields by name, unpacking).
  // Only where every field is the class's own tuple getter and indexing is tuple's: a subclass
  // that overrides either would compute something else than the items the guards read.
  if (PyTuple_Check(obj) && is_plain_namedtuple(Py_TYPE(obj))) {
    guard(GuardKind::TypeIs);
    PyOwned fields(PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(obj)), "_fields"));
    SymValue v;
    v.kind = SymValue::Kind::NamedTuple;
    v.obj = Py_NewRef(reinterpret_cast<PyObject*>(Py_TYPE(obj)));
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(obj); ++i) {
      v.field_names.push_back(PyUnicode_AsUTF8(PyTuple_GET_ITEM(fields.p, i)));
      v.items.push_back(wrap(PyTuple_GET_ITEM(obj, i), child_source(source, Source::Kind::Item, "", static_cast<int>(i))));
    }
    v.source = source;
    return v;
  }
  // An nn.Module instance: its type. Every attribute the trace reads from it is guarded on its
  // own, so one compiled entry serves all instances of a class (8 GPT-2 blocks share one).
  if (PyObject_TypeCheck(obj, reinterpret_cast<PyTypeObject*>(module_type()))) {
    guard(GuardKind::TypeIs);
    return SymValue::constant(obj, source);
  }
  PyErr_Clear();
  // A plain object (a KV cache, a config): its type and alias slot, so that a new object of the
  // class made for each call hits the same entry. Where the trace depends on the object itself,
  // pin() adds its identity.
  if (is_plain_instance(obj)) {
    guard(GuardKind::Instance);
    type_guarded_.emplace(obj, source);
    return SymValue::constant(obj, source);
  }
  // A tensor's builtin method (x.mul, read before a break and handed to the continuation on its
  // stack): made anew by every read, so guarded by its name and its tensor, and traced as the
  // method it is.
  if (PyCFunction_Check(obj) && PyCFunction_GET_SELF(obj) && THPVariable_Check(PyCFunction_GET_SELF(obj))) {
    guard(GuardKind::TypeIs);
    PyOwned name(PyUnicode_FromString(reinterpret_cast<PyCFunctionObject*>(obj)->m_ml->ml_name));
    add_guard(child_source(source, Source::Kind::Attr, "__name__"), GuardKind::Equals, name.p);
    SymValue self = wrap(PyCFunction_GET_SELF(obj), child_source(source, Source::Kind::Attr, "__self__"));
    return tensor_attr(self, PyUnicode_AsUTF8(name.p));
  }
  // A bound method (a classmethod read from its class, say) is made anew by every read: guard
  // its function and its self, not the method object.
  if (PyMethod_Check(obj) && PyFunction_Check(PyMethod_GET_FUNCTION(obj))) {
    auto attr_of = [](const SourcePtr& parent, const char* attr) {
      auto s = std::make_shared<Source>();
      s->kind = Source::Kind::Attr;
      s->name = attr;
      s->parent = parent;
      return s;
    };
    auto part = [&](const char* attr) { return attr_of(source, attr); };
    PyObject* fn = PyMethod_GET_FUNCTION(obj);
    add_guard(part("__func__"), GuardKind::IdIs, fn);
    // The __exit__ of torch.set_grad_enabled(mode) that a continuation resuming inside a
    // grad-mode block gets on its stack (continuation.cpp): the block's exit, traced as such.
    static PyObject* grad_exit_fn = resolve_python_name("torch.set_grad_enabled.__exit__");  // NB: kept
    if (fn == grad_exit_fn) {
      PyObject* self = PyMethod_GET_SELF(obj);
      PyOwned prev(PyObject_GetAttrString(self, "prev")), mode(PyObject_GetAttrString(self, "mode"));
      if (!prev.p || !mode.p || !PyBool_Check(prev.p) || !PyBool_Check(mode.p)) {
        PyErr_Clear();
        throw Unsupported("a set_grad_enabled.__exit__ without a bool prev and mode");
      }
      SourcePtr self_source = part("__self__");
      add_guard(attr_of(self_source, "prev"), GuardKind::Equals, prev.p);
      add_guard(attr_of(self_source, "mode"), GuardKind::Equals, mode.p);
      return grad_exit(wrap(self, self_source), prev.p == Py_True, mode.p == Py_True);
    }
    // The __exit__ of a torch.autocast block a continuation resumes inside (entered for real by
    // the code before it, continuation.cpp): the block's exit, traced as such (the state before
    // the block, from what its __enter__ saved), and called for real after the graph.
    static PyObject* autocast_exit_fn = resolve_python_name("torch.amp.autocast_mode.autocast.__exit__");  // NB: kept
    if (fn == autocast_exit_fn) {
      PyObject* self = PyMethod_GET_SELF(obj);
      SourcePtr self_source = part("__self__");
      PyOwned device(PyObject_GetAttrString(self, "device")), prev(PyObject_GetAttrString(self, "prev")),
          prev_dtype(PyObject_GetAttrString(self, "prev_fastdtype"));
      if (!device.p || !prev.p || !prev_dtype.p || !PyUnicode_Check(device.p) || !PyBool_Check(prev.p) || !THPDtype_Check(prev_dtype.p)) {
        PyErr_Clear();
        throw Unsupported("a torch.autocast.__exit__ whose block was not entered");
      }
      const std::string dev = PyUnicode_AsUTF8(device.p);
      if (dev != "cpu" && dev != "cuda") throw Unsupported("torch.autocast on device type " + dev);
      add_guard(attr_of(self_source, "device"), GuardKind::Equals, device.p);
      add_guard(attr_of(self_source, "prev"), GuardKind::Equals, prev.p);
      add_guard(attr_of(self_source, "prev_fastdtype"), GuardKind::IdIs, prev_dtype.p);
      runtime::AutocastState outside = ctx_.autocast;
      const c10::ScalarType dt = reinterpret_cast<THPDtype*>(prev_dtype.p)->scalar_type;
      if (dev == "cpu") { outside.cpu = prev.p == Py_True; outside.cpu_dtype = dt; }
      else { outside.cuda = prev.p == Py_True; outside.cuda_dtype = dt; }
      autocast_outside_.push_back(outside);
      SymValue m;
      m.kind = SymValue::Kind::BoundMethod;
      m.name = "__fd_real_autocast_exit__";
      m.items.push_back(wrap(self, self_source));
      return m;
    }
    SymValue m;
    m.kind = SymValue::Kind::BoundMethod;
    m.obj = Py_NewRef(fn);
    m.name = PyUnicode_AsUTF8(reinterpret_cast<PyFunctionObject*>(fn)->func_name);
    m.items.push_back(wrap(PyMethod_GET_SELF(obj), part("__self__")));
    return m;
  }
  // A closure without keyword defaults (made anew at every call, as a continuation's live nested
  // function is): guarded by its code, defaults and globals, not its identity; the cells it
  // reads are guarded through its __closure__ when it is inlined (calls.cpp target_of_function).
  if (PyFunction_Check(obj) && reinterpret_cast<PyFunctionObject*>(obj)->func_closure &&
      !reinterpret_cast<PyFunctionObject*>(obj)->func_kwdefaults) {
    guard(GuardKind::FunctionParts);
    return SymValue::constant(obj, source);
  }
  // Python modules, functions, classes, other objects: identity.
  guard(GuardKind::IdIs);
  return SymValue::constant(obj, source);
}

codegen::CallArg Tracer::to_call_arg(const SymValue& v) const {
  using codegen::CallArg;
  switch (v.kind) {
    case SymValue::Kind::Tensor: return CallArg::tensor(v.tensor);
    case SymValue::Kind::Constant: {
      PyObject* o = v.obj;
      if (v.size) {  // a size-derived int: the binder gets its expression too (record_call)
        CallArg a = CallArg::of_int(PyLong_AsLongLong(o));
        a.sym = {codegen::shapes::live(result_.graph, *v.size)};
        return a;
      }
      if (o == Py_None) return CallArg::none();
      if (o == Py_Ellipsis) return CallArg::ellipsis();
      if (PyBool_Check(o)) return CallArg::of_bool(o == Py_True);
      if (is_int(o)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow) throw Unsupported("integer argument " + py_repr(o) + " does not fit in 64 bits");
        return CallArg::of_int(x);
      }
      if (PyFloat_CheckExact(o)) return CallArg::of_double(PyFloat_AS_DOUBLE(o));
      if (PyUnicode_CheckExact(o)) return CallArg::of_string(PyUnicode_AsUTF8(o));
      if (THPDtype_Check(o)) return CallArg::of_dtype(reinterpret_cast<THPDtype*>(o)->scalar_type);
      if (THPDevice_Check(o)) return CallArg::of_device(reinterpret_cast<THPDevice*>(o)->device);
      if (THPLayout_Check(o)) {  // every op's layout is optional, and strided its default
        if (reinterpret_cast<THPLayout*>(o)->layout != at::kStrided) throw Unsupported("layout " + py_repr(o) + " (only strided tensors are traced)");
        return CallArg::none();
      }
      if (THPMemoryFormat_Check(o)) return CallArg::of_memory_format(reinterpret_cast<THPMemoryFormat*>(o)->memory_format);
      if (PySlice_Check(o)) {
        auto* s = reinterpret_cast<PySliceObject*>(o);
        auto part = [&](PyObject* p) -> std::optional<int64_t> {
          if (p == Py_None) return std::nullopt;
          if (!PyLong_Check(p)) throw Unsupported("slice bound " + py_repr(p) + " is not an int");
          return PyLong_AsLongLong(p);
        };
        return CallArg::slice(part(s->start), part(s->stop), part(s->step));
      }
      if (PyTuple_Check(o) || PyList_Check(o)) {  // includes torch.Size
        PyObject* fast = PySequence_Fast(o, "");
        const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
        std::vector<SymValue> items;
        for (Py_ssize_t i = 0; i < n; ++i) items.push_back(SymValue::constant(PySequence_Fast_GET_ITEM(fast, i)));
        Py_DECREF(fast);
        SymValue t = SymValue::tuple(std::move(items));
        return to_call_arg(t);
      }
      throw Unsupported("argument " + py_repr(o) + " of type " + Py_TYPE(o)->tp_name + " is not supported in a tensor op");
    }
    case SymValue::Kind::Tuple:
    case SymValue::Kind::List: {
      std::vector<CallArg> items;
      bool all_ints = true, all_tensors = true;
      for (const SymValue& i : v.seq()) {
        items.push_back(to_call_arg(i));
        all_ints = all_ints && items.back().kind == CallArg::Kind::Int;
        all_tensors = all_tensors && items.back().kind == CallArg::Kind::Tensor;
      }
      if (all_ints) {
        std::vector<int64_t> ints;
        std::vector<codegen::shapes::SizeExpr> sym;
        bool symbolic = false;
        for (const CallArg& a : items) {
          ints.push_back(a.i);
          sym.push_back(a.sym.empty() ? codegen::shapes::SizeExpr(a.i) : a.sym[0]);
          symbolic = symbolic || !sym.back().is_constant();
        }
        CallArg out = CallArg::of_ints(std::move(ints));
        if (symbolic) out.sym = std::move(sym);
        return out;
      }
      if (all_tensors) {
        std::vector<codegen::ValueId> ids;
        for (const CallArg& a : items) ids.push_back(a.value);
        return CallArg::of_tensors(std::move(ids));
      }
      return CallArg::tuple(std::move(items));
    }
    case SymValue::Kind::Slice: {
      auto part = [&](const SymValue& p) -> std::optional<int64_t> {
        CallArg a = to_call_arg(p);
        if (a.kind == CallArg::Kind::None) return std::nullopt;
        if (a.kind != CallArg::Kind::Int) throw Unsupported("slice bound is not an int");
        return a.i;
      };
      return CallArg::slice(part(v.items[0]), part(v.items[1]), part(v.items[2]));
    }
    default:
      throw Unsupported("argument of kind " + describe(v) + " is not supported in a tensor op");
  }
}

codegen::CallArg Tracer::index_arg(const SymValue& v) const {
  if (v.kind == SymValue::Kind::Tuple || (v.is_constant() && PyTuple_CheckExact(v.obj))) {
    std::vector<codegen::CallArg> items;
    if (v.kind == SymValue::Kind::Tuple) {
      for (const SymValue& i : v.items) items.push_back(to_call_arg(i));
    } else {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v.obj); ++i)
        items.push_back(to_call_arg(SymValue::constant(PyTuple_GET_ITEM(v.obj, i))));
    }
    return codegen::CallArg::tuple(std::move(items));
  }
  return to_call_arg(v);
}

PyObject* Tracer::materialize(const SymValue& v) const {
  switch (v.kind) {
    case SymValue::Kind::Constant:
      pin(v);  // real Python code will see this very object
      return Py_NewRef(v.obj);
    case SymValue::Kind::BoundMethod:
      if (!v.obj || !v.items[0].is_constant()) return nullptr;
      pin(v.items[0]);
      return PyMethod_New(v.obj, v.items[0].obj);
    case SymValue::Kind::Tuple:
    case SymValue::Kind::List:
    case SymValue::Kind::Slice: {
      const Py_ssize_t n = static_cast<Py_ssize_t>(v.seq().size());
      std::vector<PyObject*> objs;
      for (const SymValue& i : v.seq()) {
        PyObject* o = materialize(i);
        if (!o) {
          for (PyObject* p : objs) Py_DECREF(p);
          return nullptr;
        }
        objs.push_back(o);
      }
      PyObject* out = nullptr;
      if (v.kind == SymValue::Kind::Slice) {
        out = PySlice_New(objs[0], objs[1], objs[2]);
        for (PyObject* p : objs) Py_DECREF(p);
        return out;
      }
      out = v.kind == SymValue::Kind::Tuple ? PyTuple_New(n) : PyList_New(n);
      for (Py_ssize_t i = 0; i < n; ++i) {
        if (v.kind == SymValue::Kind::Tuple) PyTuple_SET_ITEM(out, i, objs[i]);
        else PyList_SET_ITEM(out, i, objs[i]);
      }
      // torch.Size(tuple); a list subclass's class called on the list (its __init__ is list's)
      PyObject* wrapper = v.torch_size ? reinterpret_cast<PyObject*>(&THPSizeType) : v.kind == SymValue::Kind::List ? v.obj : nullptr;
      if (wrapper) {
        PyObject* typed = PyObject_CallOneArg(wrapper, out);
        Py_DECREF(out);
        if (!typed) PyErr_Clear();
        return typed;
      }
      return out;
    }
    default: return nullptr;
  }
}

SymValue Tracer::from_capture(codegen::Family fam, const codegen::CaptureResult& r) const {
  if (r.shape == codegen::CaptureResult::Shape::None) return constant(Py_None);  // x[i] = v
  if (r.shape == codegen::CaptureResult::Shape::Tensor) {
    FD_CHECK(r.values.size() == 1, "tensor capture result with " + std::to_string(r.values.size()) + " values");
    return SymValue::of_tensor(r.values[0]);
  }
  std::vector<SymValue> items;
  for (codegen::ValueId id : r.values) items.push_back(id < 0 ? constant(Py_None) : SymValue::of_tensor(id));  // -1: None
  SymValue t = SymValue::tuple(std::move(items));
  if (!r.field_names.empty()) {
    t.kind = SymValue::Kind::NamedTuple;
    t.field_names = r.field_names;
    t.obj = named_tuple_type(fam);
  }
  return t;
}

}  // namespace fastdyn::symbolic
