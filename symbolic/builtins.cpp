// symbolic/builtins.cpp — Python builtins called on symbolic values: len, type, isinstance,
// getattr/hasattr, iter/next/enumerate/zip, list/tuple/dict, super, callable, sum of tensors;
// and torch's __torch_function__ probes, answered at trace time. Called from Tracer::call
// (calls.cpp) before a builtin is folded on constants or called as written.
#include <torch/csrc/DynamicTypes.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <iterator>

#include "runtime/errors.h"
#include "symbolic/calls.h"
#include "symbolic/py_ops.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {

PyObject* Calls::type_of(Tracer& t, const SymValue& v) {
  using K = SymValue::Kind;
  switch (v.kind) {
    case K::Constant: return reinterpret_cast<PyObject*>(Py_TYPE(v.obj));
    case K::Tensor: return v.obj ? reinterpret_cast<PyObject*>(Py_TYPE(v.obj)) : tensor_type();
    case K::Tuple: return reinterpret_cast<PyObject*>(&PyTuple_Type);
    case K::List: return v.obj ? v.obj : reinterpret_cast<PyObject*>(&PyList_Type);
    case K::Dict: return v.obj ? v.obj : reinterpret_cast<PyObject*>(&PyDict_Type);
    case K::Set: return reinterpret_cast<PyObject*>(&PySet_Type);
    case K::NamedTuple: if (v.obj) return v.obj; break;
    case K::Function: return reinterpret_cast<PyObject*>(&PyFunction_Type);
    case K::Record:
    case K::Object: return v.obj;
    case K::BoundMethod: if (v.obj) return reinterpret_cast<PyObject*>(&PyMethod_Type); break;
    default: break;
  }
  (void)t;
  throw Unsupported("type() of " + describe(v));
}

SymValue Calls::length(Tracer& t, const SymValue& v) {
  using K = SymValue::Kind;
  Py_ssize_t n;
  if (v.is_tensor()) {
    const auto& m = t.meta(v);
    if (m.dim() == 0) throw Unsupported("len() of a 0-d tensor");
    t.read_sizes(v, 0);
    n = static_cast<Py_ssize_t>(m.sizes[0]);
  } else if (v.kind == K::Tuple || v.kind == K::List || v.kind == K::NamedTuple) {
    n = static_cast<Py_ssize_t>(v.seq().size());
  } else if (v.kind == K::Dict) {
    n = static_cast<Py_ssize_t>(v.box->keys.size());
  } else if (v.kind == K::Set) {
    n = PySet_GET_SIZE(v.obj);
  } else if (v.kind == K::Record && is_model_output(v.obj)) {
    n = static_cast<Py_ssize_t>(model_output_items(v).size());
  } else if (PyObject* len_fn = (v.kind == K::Object || v.is_constant()) ? python_dunder(value_type(v), "__len__") : nullptr) {
    // A Python __len__ (of a constant, or of an object made in the trace) is inlined: run in
    // the trace as eager runs it, not once for real.
    SymValue r = t.call(Tracer::constant(len_fn), {v}, {});
    if (!r.is_constant() || !PyLong_CheckExact(r.obj) || PyLong_AsLong(r.obj) < 0) throw Unsupported("len() of " + describe(v) + " gave " + describe(r));
    return r;
  } else if (v.is_constant()) {
    t.pin(v);
    n = PyObject_Length(v.obj);
    if (n < 0) { PyErr_Clear(); throw Unsupported("len() of " + describe(v)); }
  } else {
    throw Unsupported("len() of " + describe(v));
  }
  PyOwned o(PyLong_FromSsize_t(n));
  return Tracer::constant(o.p);
}

// torch.overrides' probes (torch._C._has_torch_function, _unary, _variadic), which every
// torch.nn.functional entry and torch._assert ask first: answered at trace time. A traced tensor
// never has a __torch_function__ of its own (an input of such a subclass refuses the trace,
// conversions.cpp, and its type is guarded), a constant is asked for real (the guard on it holds
// its identity or value), and a TorchFunctionMode refuses both the trace and the compiled code
// (interpreter.cpp, the hook). True: the override would run, which the trace cannot follow.
bool Calls::may_have_torch_function(const SymValue& v) {
  using K = SymValue::Kind;
  switch (v.kind) {
    case K::Tensor: return false;
    case K::Constant: {
      static PyObject* unary = resolve_python_name("torch._C._has_torch_function_unary");
      PyOwned r(PyObject_CallOneArg(unary, v.obj));
      if (!r.p) {
        PyErr_Clear();
        throw Unsupported("__torch_function__ probe of " + describe(v));
      }
      return r.p == Py_True;
    }
    case K::Tuple:
    case K::List:
    case K::NamedTuple:
      for (const SymValue& item : v.kind == K::List ? v.box->items : v.items)
        if (may_have_torch_function(item)) return true;
      return false;
    case K::Object: return python_dunder(reinterpret_cast<PyTypeObject*>(v.obj), "__torch_function__") != nullptr;
    default: throw Unsupported("__torch_function__ probe of " + describe(v));
  }
}

bool Calls::torch_function_probe(PyObject* fn, Args& args, Kwargs& kwargs, SymValue& out) {
  static PyObject* const probes[] = {resolve_python_name("torch._C._has_torch_function"),
                                     resolve_python_name("torch._C._has_torch_function_unary"),
                                     resolve_python_name("torch._C._has_torch_function_variadic")};
  const size_t which = static_cast<size_t>(std::find(std::begin(probes), std::end(probes), fn) - std::begin(probes));
  if (which == 3 || !fn || !kwargs.empty()) return false;
  if (which < 2 && args.size() != 1) return false;  // ATen's own argument error, at run time
  bool any = false;
  for (const SymValue& a : args) any = any || may_have_torch_function(a);
  if (any) throw Unsupported("an argument has __torch_function__ (" + py_repr(fn) + ")");
  out = Tracer::constant(Py_False);
  return true;
}

// sum(iterable, start=0) where some item or the start is a tensor: start + item + item ...,
// the additions eager makes, in its order (0 + a bool tensor is an int64 tensor there too).
// Items that are neither tensors nor ints are left to eager: CPython adds floats with its own
// compensated summation, and anything else runs its type's __add__.
bool Calls::sum_of_tensors(Tracer& t, Args& args, Kwargs& kwargs, SymValue& out) {
  if (args.empty() || args.size() + kwargs.size() > 2 || (!kwargs.empty() && kwargs[0].first != "start")) return false;
  if (args[0].is_python_constant()) return false;  // folded below, with everything constant
  PyOwned zero(PyLong_FromLong(0));
  SymValue acc = args.size() == 2 ? args[1] : !kwargs.empty() ? kwargs[0].second : Tracer::constant(zero.p);
  auto addable = [](const SymValue& v) {
    return v.is_tensor() || (v.is_constant() && PyLong_Check(v.obj) && !PyBool_Check(v.obj));
  };
  SymValue it = t.make_iterator(args[0]);
  Args items = remaining(it);
  bool any_tensor = acc.is_tensor();
  for (const SymValue& v : items) {
    if (!addable(v)) return false;
    any_tensor = any_tensor || v.is_tensor();
  }
  if (!addable(acc) || !any_tensor) return false;
  for (const SymValue& v : items) acc = t.binary("+", acc, v);
  it.box->pos = it.box->items.size();  // an iterator argument is exhausted, as in eager
  out = acc;
  return true;
}

// sorted(iterable, key=None, reverse=False) of items that are constants comparing in C (str,
// int, float, tuples of them: no user __lt__ runs): sorted at trace time by Python's own sort
// (its stability and its reverse included), a new list of those constants.
SymValue Calls::sorted_constants(Tracer& t, const SymValue& iterable, Kwargs& kwargs) {
  PyOwned kw(PyDict_New());
  for (auto& [k, v] : kwargs) {
    if (k == "key" && v.is_constant() && v.obj == Py_None) continue;
    if (k != "reverse" || !v.is_constant() || !PyBool_Check(v.obj)) throw Unsupported("sorted() with " + k + "=" + describe(v));
    PyDict_SetItemString(kw.p, "reverse", v.obj);
  }
  std::vector<SymValue> items = remaining(t.make_iterator(iterable));
  PyOwned list(PyList_New(0));
  for (const SymValue& i : items) {
    if (!i.is_python_constant()) throw Unsupported("sorted() of " + describe(i));
    PyOwned o(t.materialize(i));
    if (!o.p || !compares_in_c(o.p)) throw Unsupported("sorted() of " + describe(i) + " (its comparison may run Python)");
    PyList_Append(list.p, o.p);
  }
  PyOwned args(PyTuple_Pack(1, list.p));
  PyOwned r(PyObject_Call(builtin("sorted"), args.p, kw.p));
  if (!r.p) { PyErr_Clear(); throw Unsupported("sorted() raised"); }  // TypeError: eager raises it
  std::vector<SymValue> out;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(r.p); ++i) out.push_back(Tracer::constant(PyList_GET_ITEM(r.p, i)));
  return SymValue::list(std::move(out));
}

bool Calls::builtin_call(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs, SymValue& out) {
  auto is = [&](const char* name) { return fn == builtin(name); };
  const size_t n = args.size();
  if (is("len") && n == 1 && kwargs.empty()) { out = length(t, args[0]); return true; }
  if (is("sorted") && n == 1) { out = sorted_constants(t, args[0], kwargs); return true; }
  // functools.reduce(fn, iterable[, initial]): the loop it runs, with fn inlined at each step.
  static PyObject* reduce = resolve_python_name("functools.reduce");  // NB: kept for the process
  if (fn == reduce && (n == 2 || n == 3) && kwargs.empty()) {
    std::vector<SymValue> items = remaining(t.make_iterator(args[1]));
    if (n == 2 && items.empty()) throw Unsupported("functools.reduce() of an empty iterable with no initial value (TypeError)");
    SymValue acc = n == 3 ? args[2] : items.front();
    for (size_t i = n == 3 ? 0 : 1; i < items.size(); ++i) acc = t.call(args[0], {acc, items[i]}, {});
    out = std::move(acc);
    return true;
  }
  if (is("sum") && sum_of_tensors(t, args, kwargs, out)) return true;
  // itertools.chain(*iterables): one iterator over their items in turn (the optimizer step's
  // loop over its global and own pre-hooks).
  static PyObject* chain = resolve_python_name("itertools.chain");  // NB: kept for the process
  if (fn == chain && kwargs.empty()) {
    Args items;
    bool fixed = true;
    for (SymValue& a : args) {
      SymValue inner = t.make_iterator(a);
      fixed = fixed && inner.box->fixed;
      for (SymValue& v : remaining(inner)) items.push_back(std::move(v));
    }
    out = iterator_of(std::move(items));
    out.box->fixed = fixed;
    return true;
  }
  // type() and isinstance() of a size-derived int read its type, not its number: no pin.
  const bool typed_constant = n >= 1 && args[0].kind == SymValue::Kind::Constant;
  if (is("type") && n == 1 && typed_constant) {
    out = Tracer::constant(reinterpret_cast<PyObject*>(Py_TYPE(args[0].obj)));
    return true;
  }
  if (is("isinstance") && n == 2 && args[1].is_python_constant()) {  // reads only the type
    PyOwned cls(t.materialize(args[1]));
    // Beyond the type's own MRO, isinstance asks the object's __class__: through a custom
    // __getattribute__ that is user code, which the compiled code would never run again. Classes
    // (type's) and the typing forms `int | None`, `list[int]` have C ones that answer __class__ generically
    // (typing.get_origin asks isinstance of them: huggingface_hub's field validators).
    PyTypeObject* value_type = typed_constant ? Py_TYPE(args[0].obj) : nullptr;
    const bool c_lookup = value_type == &PyType_Type || (typed_constant && typing_form(args[0].obj));
    if (typed_constant && PyType_Check(cls.p) && !PyObject_TypeCheck(args[0].obj, reinterpret_cast<PyTypeObject*>(cls.p)) &&
        !has_standard_getattribute(value_type) && !c_lookup)
      throw Unsupported(std::string("isinstance() on a ") + Py_TYPE(args[0].obj)->tp_name + " with its own __getattribute__");
    int r = typed_constant ? PyObject_IsInstance(args[0].obj, cls.p) : PyObject_IsSubclass(type_of(t, args[0]), cls.p);
    if (r < 0) { PyErr_Clear(); throw Unsupported("isinstance() with " + describe(args[1])); }
    out = Tracer::constant(r ? Py_True : Py_False);
    return true;
  }
  if (is("type") && n == 1 && !args[0].is_constant()) { out = Tracer::constant(type_of(t, args[0])); return true; }
  if ((is("getattr") && (n == 2 || n == 3)) || (is("hasattr") && n == 2)) {
    if (!args[1].is_constant() || !PyUnicode_Check(args[1].obj)) throw Unsupported("getattr with a non-constant name");
    const std::string name = PyUnicode_AsUTF8(args[1].obj);
    const bool has = is("hasattr");
    if (args[0].kind == SymValue::Kind::Object && python_dunder(reinterpret_cast<PyTypeObject*>(args[0].obj), "__getattribute__")) {
      // Its class's own __getattribute__ answers, inlined; an AttributeError it raises is the
      // False or the default.
      const size_t depth = t.frames_.size();
      try {
        SymValue v = t.load_attr(args[0], name);
        out = has ? Tracer::constant(Py_True) : v;
        return true;
      } catch (const Raised& r) {
        if (!PyObject_IsSubclass(r.type, PyExc_AttributeError) || (!has && n == 2) || !t.unwind_to(depth)) throw;
        out = has ? Tracer::constant(Py_False) : args[2];
        return true;
      }
    }
    if (args[0].kind == SymValue::Kind::Object) {
      SymValue v;
      if (!t.object_lookup(args[0], name, &v)) {
        if (has) { out = Tracer::constant(Py_False); return true; }
        if (n == 3) { out = args[2]; return true; }
        throw Unsupported(describe(args[0]) + " has no attribute '" + name + "' (AttributeError)");
      }
      out = has ? Tracer::constant(Py_True) : v;
      return true;
    }
    if (args[0].is_constant() && has_standard_getattribute(Py_TYPE(args[0].obj))) {
      if (const SymValue* written = t.written_attr(args[0].obj, name)) {  // stored (or deleted) earlier in the trace
        if (written->is_null()) {
          if (has) { out = Tracer::constant(Py_False); return true; }
          if (n == 3) { out = args[2]; return true; }
          throw Unsupported("getattr of an attribute deleted in the frame (AttributeError)");
        }
        out = has ? Tracer::constant(Py_True) : *written;
        return true;
      }
    }
    if (args[0].is_constant()) {
      std::optional<SymValue> got;  // a getter inlined to find out: its result (run once, as eager)
      if (!t.has_attr_guarded(args[0], name, &got)) {
        if (has) { out = Tracer::constant(Py_False); return true; }
        if (n == 3) { out = args[2]; return true; }
        throw Unsupported("getattr of a missing attribute");
      }
      if (got) { out = has ? Tracer::constant(Py_True) : std::move(*got); return true; }
    }
    if (args[0].is_tensor() && has) {
      out = Tracer::constant(PyObject_HasAttrString(tensor_type(), name.c_str()) || name == "grad" ? Py_True : Py_False);
      return true;
    }
    // A list, dict or tuple built in the trace has its type's attributes and no others.
    using K = SymValue::Kind;
    const K kind = args[0].kind;
    if (kind == K::List || kind == K::Dict || kind == K::Tuple) {
      PyObject* type = kind == K::Dict ? type_of(t, args[0]) : reinterpret_cast<PyObject*>(kind == K::List ? &PyList_Type : &PyTuple_Type);
      if (!PyObject_HasAttrString(type, name.c_str())) {
        if (has) { out = Tracer::constant(Py_False); return true; }
        if (n == 3) { out = args[2]; return true; }
        throw Unsupported("getattr of a missing attribute");
      }
      if (has) { out = Tracer::constant(Py_True); return true; }
    }
    SymValue v = t.load_attr(args[0], name);
    out = has ? Tracer::constant(Py_True) : v;
    return true;
  }
  const bool ordered = fn == reinterpret_cast<PyObject*>(&PyODict_Type);
  if (!kwargs.empty() && !is("enumerate") && !is("dict") && !ordered && !is("getattr") && !is("zip")) return false;
  if ((is("iter") && n == 1) || (is("reversed") && n == 1)) {
    SymValue it = t.make_iterator(args[0]);
    if (is("reversed")) {
      const bool fixed = it.box->fixed;
      Args items = remaining(it);
      std::reverse(items.begin(), items.end());
      it = iterator_of(std::move(items));
      it.box->fixed = fixed;
    }
    out = it;
    return true;
  }
  if (is("next") && n >= 1 && args[0].kind == SymValue::Kind::Iterator) {
    auto& box = *args[0].box;
    if (box.pos < box.items.size()) out = box.items[box.pos++];
    else if (n == 2) { out = args[1]; box.exhausted = true; }
    else throw Unsupported("next() of an exhausted iterator");
    return true;
  }
  if (is("enumerate") && (n == 1 || n == 2)) {
    long start = 0;
    const SymValue* start_v = n == 2 ? &args[1] : nullptr;
    for (auto& [k, v] : kwargs) {
      if (k != "start" || start_v) throw Unsupported("enumerate() keyword '" + k + "'");
      start_v = &v;
    }
    if (start_v) {
      if (!start_v->is_constant() || !PyLong_Check(start_v->obj)) throw Unsupported("enumerate start");
      start = PyLong_AsLong(start_v->obj);
    }
    Args items;
    SymValue inner = t.make_iterator(args[0]);
    for (SymValue& v : remaining(inner)) {
      PyOwned i(PyLong_FromLong(start++));
      items.push_back(SymValue::tuple({Tracer::constant(i.p), v}));
    }
    out = iterator_of(std::move(items));
    out.box->fixed = inner.box->fixed;
    return true;
  }
  if (is("zip")) {
    // zip(..., strict=b): strict sequences of unequal lengths raise, which eager must do.
    bool strict = false;
    for (const auto& [k, v] : kwargs) {
      if (k != "strict" || !v.is_constant() || !PyBool_Check(v.obj)) throw Unsupported("zip() keyword '" + k + "'");
      strict = v.obj == Py_True;
    }
    std::vector<Args> seqs;
    size_t len = SIZE_MAX;
    bool fixed = true;
    for (SymValue& a : args) {
      SymValue inner = t.make_iterator(a);
      fixed = fixed && inner.box->fixed;
      seqs.push_back(remaining(inner));
      if (strict && len != SIZE_MAX && seqs.back().size() != len) throw Unsupported("zip(strict=True) of unequal lengths");
      len = std::min(len, seqs.back().size());
    }
    if (seqs.empty()) len = 0;
    Args items;
    for (size_t i = 0; i < len; ++i) {
      Args tup;
      for (auto& s : seqs) tup.push_back(s[i]);
      items.push_back(SymValue::tuple(std::move(tup)));
    }
    out = iterator_of(std::move(items));
    out.box->fixed = fixed;
    return true;
  }
  if ((is("list") || is("tuple")) && n == 1 && !args[0].is_python_constant()) {
    Args items = remaining(t.make_iterator(args[0]));
    out = is("list") ? SymValue::list(std::move(items)) : SymValue::tuple(std::move(items));
    return true;
  }
  if (is("list") && n == 0) { out = SymValue::list({}); return true; }
  // dict(...) and collections.OrderedDict(...): a Dict of the trace (an OrderedDict one tagged
  // with its type in obj: values.h).
  if ((is("dict") || ordered) && n <= 1) {
    SymValue d = SymValue::boxed(SymValue::Kind::Dict);
    if (ordered) d.obj = Py_NewRef(fn);
    // A key seen before keeps its place and takes the new value, as eager's dict does.
    auto put = [&](const SymValue& key, const SymValue& value) {
      if (!key.is_constant()) throw Unsupported("dict() with a non-constant key");
      for (size_t i = 0; i < d.box->keys.size(); ++i) {
        const int eq = t.equal(d.box->keys[i], key);
        if (eq < 0) { PyErr_Clear(); throw Unsupported("dict key comparison raised"); }
        if (eq) { d.box->items[i] = value; return; }
      }
      d.box->keys.push_back(key);
      d.box->items.push_back(value);
    };
    if (n == 1) {
      if (args[0].kind == SymValue::Kind::Dict) {
        d.box->keys = args[0].box->keys;
        d.box->items = args[0].box->items;
      } else {
        for (SymValue& pair : remaining(t.make_iterator(args[0]))) {
          Args kv = t.unpack(pair, 2);
          put(kv[0], kv[1]);
        }
      }
    }
    for (auto& [k, v] : kwargs) {
      PyOwned key(PyUnicode_FromString(k.c_str()));
      put(Tracer::constant(key.p), v);
    }
    out = d;
    return true;
  }
  if (is("super")) {
    SymValue self, cls;
    if (n == 2) {
      cls = args[0];
      self = args[1];
    } else if (n == 0) {
      FrameState& f = t.fr();
      PyCodeObject* co = f.code;
      if (co->co_argcount < 1) throw Unsupported("super() without arguments outside a method");
      self = t.local(0);
      if (self.kind == SymValue::Kind::Cell) self = self.box->items.empty() ? SymValue() : self.box->items[0];
      for (int i = 0; i < co->co_nlocalsplus; ++i)
        if (std::strcmp(PyUnicode_AsUTF8(PyTuple_GET_ITEM(co->co_localsplusnames, i)), "__class__") == 0 && f.locals[static_cast<size_t>(i)]) {
          SymValue& c = *f.locals[static_cast<size_t>(i)];
          if (c.kind != SymValue::Kind::Cell) continue;
          if (!c.box->items.empty()) {  // read, stored or deleted (NULL) in the trace: its value now
            if (!c.box->items[0].is_constant()) throw Unsupported("super() with __class__ deleted or not a class");
            cls = c.box->items[0];
          } else if (c.obj && PyCell_GET(c.obj)) {
            cls = Tracer::constant(PyCell_GET(c.obj));
          }
        }
      if (!cls.obj) throw Unsupported("super() without __class__");
    } else {
      throw Unsupported("super() with one argument");
    }
    if (self.kind == SymValue::Kind::Object && cls.is_constant() && PyType_Check(cls.obj) &&
        PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(self.obj), reinterpret_cast<PyTypeObject*>(cls.obj))) {
      out = Tracer::constant(cls.obj);  // looked up past cls in the object's MRO (load_attr)
      out.name = "__fd_object_super__";
      out.items.push_back(self);
      return true;
    }
    if (!self.is_constant() || !cls.is_constant()) throw Unsupported("super() of " + describe(self));
    PyOwned sup(PyObject_CallFunctionObjArgs(reinterpret_cast<PyObject*>(&PySuper_Type), cls.obj, self.obj, nullptr));
    if (!sup.p) { PyErr_Clear(); throw Unsupported("super() raised"); }
    out = Tracer::constant(sup.p);
    out.name = "__super__";
    out.items.push_back(self);
    return true;
  }
  if (is("delattr") && n == 2 && kwargs.empty() && args[1].is_constant() && PyUnicode_CheckExact(args[1].obj)) {
    t.delete_attr(args[0], PyUnicode_AsUTF8(args[1].obj));
    out = Tracer::constant(Py_None);
    return true;
  }
  if (is("setattr") && n == 3 && kwargs.empty() && args[1].is_constant() && PyUnicode_CheckExact(args[1].obj)) {
    t.store_attr(args[0], PyUnicode_AsUTF8(args[1].obj), args[2]);
    out = Tracer::constant(Py_None);
    return true;
  }
  if (is("callable") && n == 1) {
    using K = SymValue::Kind;
    bool c = args[0].is_constant() ? PyCallable_Check(args[0].obj) : (args[0].kind == K::Function || args[0].kind == K::BoundMethod || args[0].kind == K::Method);
    out = Tracer::constant(c ? Py_True : Py_False);
    return true;
  }
  return false;
}

// torch.tensor(data, dtype=..., device=...) and torch.as_tensor of Python numbers (a number, or rectangular nested
// lists/tuples of them, up to kMaxTensorData elements): each number a 0-d full(), stacked along
// each level, which constant folding then evaluates once; of empty data (torch.tensor([]), as
// transformers' KV cache starts its layers): a full() of size (0,). The dtype torch.tensor
// infers: bool if every number is, else int64 if every number is an int, else the default.
// torch.as_tensor of a tensor is Tensor.to(dtype, device): the tensor itself when both match.
bool Calls::tensor_from_data(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs, SymValue& out) {
  using K = SymValue::Kind;
  static PyObject* tensor_fn = resolve_python_name("torch.tensor");
  static PyObject* as_tensor_fn = resolve_python_name("torch.as_tensor");
  if ((fn != tensor_fn && fn != as_tensor_fn) || args.size() != 1) return false;
  if (fn == as_tensor_fn && args[0].is_tensor()) {
    Kwargs to_kwargs;
    for (auto& [k, v] : kwargs) {
      if (k != "dtype" && k != "device") throw Unsupported("torch.as_tensor keyword '" + k + "'");
      if (!(v.is_constant() && v.obj == Py_None)) to_kwargs.emplace_back(k, v);
    }
    out = to_kwargs.empty() ? args[0] : t.call_tensor_method(args[0], "to", {}, std::move(to_kwargs));
    return true;
  }
  constexpr size_t kMaxTensorData = 256;
  // The items of a list or tuple of the trace, or of a constant one; nullopt for anything else.
  // NB: a size-derived int is tested first (is_constant() would specialise it).
  auto items_of = [&](const SymValue& d) -> std::optional<std::vector<SymValue>> {
    if (d.kind == K::List || d.kind == K::Tuple) return d.seq();
    if (d.size || !d.is_constant() || !(PyTuple_CheckExact(d.obj) || PyList_CheckExact(d.obj))) return std::nullopt;
    std::vector<SymValue> items;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(d.obj); ++i) items.push_back(Tracer::constant(PySequence_Fast_ITEMS(d.obj)[i]));
    return items;
  };
  // Whether `d` nests only numbers, counting them and the kinds torch.tensor infers from.
  size_t count = 0;
  bool all_bool = true, all_int = true;
  std::function<bool(const SymValue&)> scan = [&](const SymValue& d) -> bool {
    if (auto items = items_of(d)) {
      for (const SymValue& e : *items)
        if (!scan(e)) return false;
      return true;
    }
    if (d.size) {  // a size-derived int: a number of the trace
      all_bool = false;
      return ++count <= kMaxTensorData;
    }
    if (!d.is_constant()) return false;
    PyObject* o = d.obj;
    if (!PyFloat_CheckExact(o) && !PyLong_CheckExact(o) && !PyBool_Check(o)) return false;
    all_bool = all_bool && PyBool_Check(o);
    all_int = all_int && !PyFloat_CheckExact(o);
    return ++count <= kMaxTensorData;
  };
  const SymValue& data = args[0];
  if (scan(data)) {
    std::vector<std::pair<std::string, SymValue>> kw;
    bool has_dtype = false;
    for (auto& [k, v] : kwargs) {
      if (k == "requires_grad" && v.is_constant() && v.obj == Py_False) continue;
      if (k != "dtype" && k != "device") throw Unsupported("torch.tensor keyword '" + k + "'");
      has_dtype = has_dtype || (k == "dtype" && !(v.is_constant() && v.obj == Py_None));
      kw.emplace_back(k, v);
    }
    if (!has_dtype) {
      PyOwned dt(count > 0 && all_bool ? resolve_python_name("torch.bool")
                 : count > 0 && all_int ? resolve_python_name("torch.int64")
                                        : Py_NewRef(reinterpret_cast<PyObject*>(torch::getTHPDtype(t.ctx_.default_dtype))));
      kw.emplace_back("dtype", Tracer::constant(dt.p));
    }
    auto full = family_of_name("torch.full");
    auto stack = family_of_name("torch.stack");
    if (!full || !stack) throw Unsupported("torch.full or torch.stack is not in the op table");
    PyOwned zero(PyLong_FromLong(0));
    std::function<SymValue(const SymValue&)> build = [&](const SymValue& d) -> SymValue {
      std::optional<std::vector<SymValue>> items = items_of(d);
      if (!items) return t.call_family(*full, {SymValue::tuple({}), d}, kw, "torch.tensor");
      if (items->empty()) {
        if (&d != &data) throw Unsupported("torch.tensor of nested empty data");
        return t.call_family(*full, {SymValue::tuple({Tracer::constant(zero.p)}), Tracer::constant(zero.p)}, kw, "torch.tensor");
      }
      std::vector<SymValue> parts;
      for (const SymValue& e : *items) parts.push_back(build(e));
      return t.call_family(*stack, {SymValue::list(std::move(parts))}, {}, "torch.tensor");
    };
    out = build(data);
    return true;
  }
  return false;
}

}  // namespace fastdyn::symbolic
