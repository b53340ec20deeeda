// symbolic/containers.cpp — methods of the containers a trace builds or reads (list.append,
// dict.get, tuple.index ...), answered on their symbolic items; a list or dict the caller can see
// that the trace mutates gets its final contents after the graph (Tracer::mutate_visible).
#include <algorithm>
#include <cstring>

#include "runtime/errors.h"
#include "symbolic/py_ops.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {

void Tracer::check_not_iterating(const SymValue& c, const std::string& what) const {
  if (!c.box) return;
  for (const auto& [container, it] : live_iterators_)
    if (container == c.box.get() && !it->exhausted)
      throw Unsupported(what + " on a " + describe(c) + " while the trace iterates it");
}

void Tracer::mutate_visible(const SymValue& c, const std::string& what) {
  using K = SymValue::Kind;
  if (!c.box || (c.kind != K::List && c.kind != K::Dict && c.kind != K::Set)) throw Unsupported(what + " on " + describe(c) + " the caller can see");
  auto o = visible_object_.find(c.box.get());
  if (o == visible_object_.end()) throw Unsupported(what + " on a " + describe(c) + " the caller can see");
  PyObject* obj = o->second;
  // Its keys()/values()/items() were taken in the trace (a snapshot, not linked to it): a view
  // eager's code still iterates would see this mutation, or raise for a size change.
  if (iterated_boxes_.count(c.box.get()))
    throw Unsupported(what + " on a " + describe(c) + " the caller can see, after taking a view of it");
  if (mutated_visible_.count(obj)) return;  // its SetContents is recorded already
  // Read through two paths before this mutation: two boxes of one object, the other stale.
  if (visible_boxes_[obj].size() > 1)
    throw Unsupported(what + " on a " + describe(c) + " the caller can see, read through two paths");
  // The items it drops are released after the graph, not where eager drops them: none may run
  // code when released (a __del__, a finalizer).
  auto finalizes = [](const SymValue& v) {
    PyTypeObject* tp = v.obj ? Py_TYPE(v.obj) : nullptr;
    return tp && (tp->tp_finalize || tp->tp_del);
  };
  for (const SymValue& v : c.box->items)
    if (finalizes(v)) throw Unsupported(what + " on a " + describe(c) + " the caller can see, holding an object with a finalizer");
  mutated_visible_.emplace(obj, c);
  if (c.kind == K::Set) return;  // its calls are replayed one by one (container_method)
  TraceResult::SideEffect e;
  e.target = c;
  e.value = c;  // the same box, as a value made in the trace: its items are the graph's outputs
  e.value.source = nullptr;
  e.kind = TraceResult::SideEffect::Kind::SetContents;
  e.before_keys = c.box->keys;
  e.before_items = c.box->items;
  result_.effects.push_back(std::move(e));
}

bool TraceResult::SideEffect::replayed() const {
  if (kind != Kind::SetContents) return true;
  const SymBox& now = *target.box;
  if (now.keys.size() != before_keys.size() || now.items.size() != before_items.size()) return true;
  // The very object that was there: read from the same path, or the same constant object.
  auto same = [](const SymValue& a, const SymValue& b) {
    if (a.kind != b.kind) return false;
    if (a.source || b.source) return a.source && b.source && source_key(*a.source) == source_key(*b.source);
    return a.kind == SymValue::Kind::Constant && !a.size && !b.size && a.obj && a.obj == b.obj;
  };
  for (size_t i = 0; i < now.keys.size(); ++i)
    if (!same(now.keys[i], before_keys[i])) return true;
  for (size_t i = 0; i < now.items.size(); ++i)
    if (!same(now.items[i], before_items[i])) return true;
  return false;
}

void Tracer::replay_call(const SymValue& target, const std::string& name, PyObject* args) {
  result_.effects.push_back({target, name, constant(args), TraceResult::SideEffect::Kind::CallMethod});
}

SymValue set_value(PyObject* set) {
  SymValue v;
  v.kind = SymValue::Kind::Set;
  v.obj = Py_NewRef(set);
  v.box = std::make_shared<SymBox>();
  return v;
}

PyObject* set_operand(const SymValue& v) {
  if (v.kind == SymValue::Kind::Set) return PySet_New(v.obj);
  if (v.kind == SymValue::Kind::Constant && v.obj && PyAnySet_Check(v.obj) && compares_in_c(v.obj)) return Py_NewRef(v.obj);
  return nullptr;
}

// list.append, dict.get ...: methods of containers made in the trace, and of lists and dicts the
// caller passed (mutations replayed: mutate_visible).
SymValue Tracer::container_method(SymValue self, const std::string& name, std::vector<SymValue> args,
                                  std::vector<std::pair<std::string, SymValue>> kwargs) {
  Tracer& t = *this;
  using Args = std::vector<SymValue>;
  using K = SymValue::Kind;
  if (name == "__fd_generic_getattr__" && args.size() == 1 && args[0].is_constant() && PyUnicode_Check(args[0].obj) &&
      (self.is_constant() || self.kind == K::Object)) {  // object.__getattribute__(self, name): the generic lookup, traced
    t.generic_lookup_ = true;
    return t.load_attr(self, PyUnicode_AsUTF8(args[0].obj));
  }
  if (name == "__fd_generic_setattr__" && args.size() == 2 && args[0].is_constant() && PyUnicode_Check(args[0].obj) &&
      self.kind == K::Object) {  // object.__setattr__(self, name, value) on an object of the trace: into its box
    t.store_object_attr(self, PyUnicode_AsUTF8(args[0].obj), args[1]);
    return Tracer::constant(Py_None);
  }
  auto mutate = [&]() {
    for (const SymValue& a : args)  // x.append(x): a container holding itself is left to Python
      if (self.box && a.holds_box(self.box.get())) throw Unsupported("a container that holds itself");
    t.check_not_iterating(self, describe(self) + "." + name + "()");
    if (self.source) t.mutate_visible(self, describe(self) + "." + name + "()");
  };
  if (self.kind == K::NamedTuple && name == "_replace" && args.empty()) {  // a new tuple of its type
    SymValue r = self;
    for (auto& [k, v] : kwargs) {
      auto f = std::find(r.field_names.begin(), r.field_names.end(), k);
      if (f == r.field_names.end()) throw Unsupported("_replace of " + describe(self) + " with no field '" + k + "' (ValueError)");
      r.items[static_cast<size_t>(f - r.field_names.begin())] = std::move(v);
    }
    return r;
  }
  if (!kwargs.empty() && !(self.kind == K::Dict && name == "update"))
    throw Unsupported(describe(self) + "." + name + " with keyword arguments");
  const size_t n = args.size();
  if (self.kind == K::Set) {  // on the private set, with constant items: as eager does to its set
    PyOwned tuple(PyTuple_New(static_cast<Py_ssize_t>(n)));
    for (size_t i = 0; i < n; ++i) {
      const SymValue& a = args[i];
      PyObject* o = set_operand(a);
      if (!o && a.is_python_constant()) o = t.materialize(a);
      if (!o || !compares_in_c(o)) {
        Py_XDECREF(o);
        throw Unsupported("set." + name + "() of " + describe(a));
      }
      PyTuple_SET_ITEM(tuple.p, static_cast<Py_ssize_t>(i), o);  // stolen
    }
    static const char* mutating[] = {"add", "discard", "remove", "update", "clear", "pop", "difference_update",
                                     "intersection_update", "symmetric_difference_update"};
    static const char* pure[] = {"copy", "union", "intersection", "difference", "symmetric_difference",
                                 "issubset", "issuperset", "isdisjoint", "__contains__", "__len__"};
    const bool mutates = std::find_if(std::begin(mutating), std::end(mutating), [&](const char* m) { return name == m; }) != std::end(mutating);
    const bool reads = std::find_if(std::begin(pure), std::end(pure), [&](const char* m) { return name == m; }) != std::end(pure);
    if (!mutates && !reads) throw Unsupported("set." + name + "()");
    if (mutates) t.check_not_iterating(self, "set." + name + "()");
    if (mutates && self.source) {  // the caller's set: the same call on it after the graph
      t.mutate_visible(self, "set." + name + "()");
      t.replay_call(self, name, tuple.p);  // the operands as they are now
    }
    PyOwned method(PyObject_GetAttrString(self.obj, name.c_str()));
    PyOwned r(method.p ? PyObject_Call(method.p, tuple.p, nullptr) : nullptr);
    if (!r.p) { PyErr_Clear(); throw Unsupported("set." + name + "() raised"); }  // KeyError: eager raises it
    if (PySet_CheckExact(r.p)) return set_value(r.p);  // a new set (copy, union, ...)
    return Tracer::constant(r.p);
  }
  if (self.kind == K::List) {
    auto& items = self.box->items;
    if (name == "append" && n == 1) { mutate(); items.push_back(args[0]); return Tracer::constant(Py_None); }
    if (name == "extend" && n == 1) {
      mutate();
      for (SymValue& v : remaining(t.make_iterator(args[0]))) items.push_back(v);
      return Tracer::constant(Py_None);
    }
    if (name == "insert" && n == 2 && args[0].is_constant() && PyLong_Check(args[0].obj)) {
      mutate();
      long i = PyLong_AsLong(args[0].obj);
      const long sz = static_cast<long>(items.size());
      if (i < 0) i = std::max(0L, i + sz);
      i = std::min(i, sz);
      items.insert(items.begin() + i, args[1]);
      return Tracer::constant(Py_None);
    }
    if (name == "pop" && n <= 1) {
      mutate();
      if (items.empty()) throw Unsupported("pop from an empty list");
      long i = static_cast<long>(items.size()) - 1;
      if (n == 1) {
        if (!args[0].is_constant() || !PyLong_Check(args[0].obj)) throw Unsupported("list.pop index");
        i = PyLong_AsLong(args[0].obj);
        if (i < 0) i += static_cast<long>(items.size());
      }
      if (i < 0 || i >= static_cast<long>(items.size())) throw Unsupported("pop index out of range");
      SymValue v = items[static_cast<size_t>(i)];
      items.erase(items.begin() + i);
      return v;
    }
    if (name == "copy" && n == 0) return SymValue::list(items);
    if (name == "reverse" && n == 0) {
      mutate();
      std::reverse(items.begin(), items.end());
      return Tracer::constant(Py_None);
    }
    if (name == "clear" && n == 0) {
      mutate();
      items.clear();
      return Tracer::constant(Py_None);
    }
    if ((name == "index" || name == "count") && n == 1 && args[0].is_constant()) {
      long count = 0, first = -1;
      for (size_t i = 0; i < items.size(); ++i) {
        // Every item compared before the match is compared by ==: a tensor's (a bool() of
        // a tensor, which raises) or another value's the trace cannot answer.
        if (!items[i].is_constant()) throw Unsupported("list." + name + " compares with a " + describe(items[i]));
        if (t.equal(items[i], args[0]) == 1) {
          if (first < 0) first = static_cast<long>(i);
          ++count;
          if (name == "index") break;
        }
      }
      PyErr_Clear();
      if (name == "index" && first < 0) throw Unsupported("list.index of a missing value");
      PyOwned r(PyLong_FromLong(name == "index" ? first : count));
      return Tracer::constant(r.p);
    }
  }
  if (self.kind == K::Dict) {
    auto find = [&](const SymValue& key) -> int {
      if (!key.is_constant()) throw Unsupported("dict key " + describe(key));
      for (size_t i = 0; i < self.box->keys.size(); ++i) {
        int eq = t.equal(self.box->keys[i], key);
        if (eq < 0) { PyErr_Clear(); throw Unsupported("dict key comparison raised"); }
        if (eq) return static_cast<int>(i);
      }
      return -1;
    };
    if (name == "get" && (n == 1 || n == 2)) {
      int i = find(args[0]);
      return i >= 0 ? self.box->items[static_cast<size_t>(i)] : (n == 2 ? args[1] : Tracer::constant(Py_None));
    }
    if ((name == "keys" || name == "values" || name == "items") && n == 0) t.iterated_boxes_.insert(self.box.get());
    if (name == "keys" && n == 0) {
      // A real keys view (of a dict of the same keys): set operations work on it, and it is
      // what the code sees again if the trace breaks while it is on the stack.
      PyOwned keys(PyDict_New());
      for (const SymValue& k : self.box->keys)
        if (!k.is_constant() || PyDict_SetItem(keys.p, k.obj, Py_None) < 0) { PyErr_Clear(); throw Unsupported("dict.keys() with a key that is not a constant"); }
      PyOwned view(PyObject_CallMethod(keys.p, "keys", nullptr));
      if (!view.p) { PyErr_Clear(); throw Unsupported("dict.keys()"); }
      return Tracer::constant(view.p);
    }
    if ((name == "values" || name == "items") && n == 0) {
      // Of constants: a real view, as keys() gives (its repr, set operations and == are the
      // view's). Holding tensors: a snapshot of them, iterated in practice.
      bool constants = true;
      for (size_t i = 0; i < self.box->keys.size(); ++i)
        constants = constants && self.box->keys[i].is_constant() && self.box->items[i].is_constant() &&
                    holds_only_builtin_values(self.box->items[i].obj, 0);
      if (constants) {
        PyOwned d(PyDict_New());
        for (size_t i = 0; i < self.box->keys.size(); ++i)
          if (PyDict_SetItem(d.p, self.box->keys[i].obj, self.box->items[i].obj) < 0) { PyErr_Clear(); throw Unsupported("dict." + name + "()"); }
        PyOwned view(PyObject_CallMethod(d.p, name.c_str(), nullptr));
        if (!view.p) { PyErr_Clear(); throw Unsupported("dict." + name + "()"); }
        return Tracer::constant(view.p);
      }
      Args out;
      for (size_t i = 0; i < self.box->keys.size(); ++i) {
        if (name == "keys") out.push_back(self.box->keys[i]);
        else if (name == "values") out.push_back(self.box->items[i]);
        else out.push_back(SymValue::tuple({self.box->keys[i], self.box->items[i]}));
      }
      return SymValue::tuple(std::move(out));  // a snapshot view: iterated, not mutated, in practice
    }
    if (name == "pop" && (n == 1 || n == 2)) {
      mutate();
      int i = find(args[0]);
      if (i < 0) {
        if (n == 2) return args[1];
        throw Unsupported("dict.pop of a missing key");
      }
      SymValue v = self.box->items[static_cast<size_t>(i)];
      self.box->keys.erase(self.box->keys.begin() + i);
      self.box->items.erase(self.box->items.begin() + i);
      return v;
    }
    if (name == "update" && n == 0 && !kwargs.empty()) args.push_back(SymValue::boxed(K::Dict));
    if (name == "update" && args.size() == 1 && !kwargs.empty()) {
      SymValue merged = SymValue::boxed(K::Dict);
      if (args[0].kind != K::Dict) throw Unsupported("dict.update with " + describe(args[0]));
      merged.box->keys = args[0].box->keys;
      merged.box->items = args[0].box->items;
      for (auto& [k, v] : kwargs) {
        PyOwned key(PyUnicode_FromString(k.c_str()));
        merged.box->keys.push_back(Tracer::constant(key.p));
        merged.box->items.push_back(v);
      }
      args[0] = merged;
      kwargs.clear();
    }
    if ((name == "update" && args.size() == 1) || (name == "setdefault" && (n == 1 || n == 2))) {
      mutate();
      if (name == "setdefault") {
        int i = find(args[0]);
        if (i >= 0) return self.box->items[static_cast<size_t>(i)];
        self.box->keys.push_back(args[0]);
        self.box->items.push_back(n == 2 ? args[1] : Tracer::constant(Py_None));
        return self.box->items.back();
      }
      if (args[0].kind != K::Dict) throw Unsupported("dict.update with " + describe(args[0]));
      for (size_t k = 0; k < args[0].box->keys.size(); ++k) {
        int i = find(args[0].box->keys[k]);
        if (i >= 0) self.box->items[static_cast<size_t>(i)] = args[0].box->items[k];
        else {
          self.box->keys.push_back(args[0].box->keys[k]);
          self.box->items.push_back(args[0].box->items[k]);
        }
      }
      return Tracer::constant(Py_None);
    }
    if (name == "copy" && n == 0) {
      SymValue d = SymValue::boxed(K::Dict);
      d.obj = Py_XNewRef(self.obj);  // an OrderedDict's copy is one
      d.box->keys = self.box->keys;
      d.box->items = self.box->items;
      return d;
    }
  }
  if (self.kind == K::Record) {
    if (name == "to_tuple" && n == 0) return SymValue::tuple(model_output_items(self));
    if ((name == "keys" || name == "values" || name == "items") && n == 0) {
      Args out;
      for (size_t i = 0; i < self.items.size(); ++i) {
        if (self.items[i].is_constant() && self.items[i].obj == Py_None) continue;
        PyOwned key(PyUnicode_FromString(self.field_names[i].c_str()));
        if (name == "keys") out.push_back(Tracer::constant(key.p));
        else if (name == "values") out.push_back(self.items[i]);
        else out.push_back(SymValue::tuple({Tracer::constant(key.p), self.items[i]}));
      }
      return SymValue::tuple(std::move(out));
    }
    if (name == "get" && (n == 1 || n == 2) && args[0].is_constant() && PyUnicode_Check(args[0].obj))
      for (size_t i = 0; i < self.items.size(); ++i)
        if (self.field_names[i] == PyUnicode_AsUTF8(args[0].obj) && !(self.items[i].is_constant() && self.items[i].obj == Py_None))
          return self.items[i];
    if (name == "get") return n == 2 ? args[1] : Tracer::constant(Py_None);
  }
  if (self.kind == K::Tuple && name == "index" && n == 1 && args[0].is_constant()) {
    for (size_t i = 0; i < self.items.size(); ++i)
      if (self.items[i].is_constant() && t.equal(self.items[i], args[0]) == 1) {
        PyOwned r(PyLong_FromSize_t(i));
        return Tracer::constant(r.p);
      }
    PyErr_Clear();
  }
  throw Unsupported(describe(self) + "." + name + "() is not supported");
}

}  // namespace fastdyn::symbolic
