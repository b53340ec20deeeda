// runtime/guards.cpp — guard tree construction and evaluation (see guards.h).
#include "runtime/guards.h"
#include "runtime/interned_names.h"
#include "runtime/errors.h"

#include "runtime/format.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include <ATen/Context.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DefaultDtype.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/autograd/python_variable.h>


namespace fastdyn::runtime {
namespace {

// A path from the frame to the object being checked, kept on the C stack and only formatted
// when a failure is reported.
struct PathLink {
  const Accessor* accessor;
  const PathLink* parent;
};

std::string format_path(const PathLink* link) {
  if (!link) return "";
  std::string base = format_path(link->parent);
  const Accessor& a = *link->accessor;
  switch (a.kind) {
    case AccessKind::Local: return "L['" + a.name + "']";
    case AccessKind::Global: return "G['" + a.name + "']";
    case AccessKind::Builtin: return "B['" + a.name + "']";
    case AccessKind::Closure: return "C['" + a.name + "']";
    case AccessKind::Attr: return base + "." + a.name;
    case AccessKind::Item: return base + "[" + std::to_string(a.index) + "]";
    case AccessKind::DictItem: return base + (a.object ? "[" + a.name + "]" : "['" + a.name + "']");
    case AccessKind::Const: return "K['" + a.name + "']";
  }
  return base;
}

std::string repr(PyObject* o) {
  PyObject* r = PyObject_Repr(o);
  if (!r) { PyErr_Clear(); return "<unrepresentable>"; }
  const char* s = PyUnicode_AsUTF8(r);
  std::string out = s ? s : "<unrepresentable>";
  Py_DECREF(r);
  if (out.size() > 80) out = out.substr(0, 77) + "...";
  return out;
}

std::string list_str(c10::IntArrayRef v) { return int_list_str(v.data(), v.size()); }

std::string strides_str(const TensorSpec& s) {  // a free stride prints as "*"
  std::string out = "[";
  for (size_t d = 0; d < s.strides.size(); ++d)
    out += (d ? ", " : "") + (s.strides[d] == kAnyStride ? std::string("*") : std::to_string(s.strides[d]));
  return out + "]";
}

std::string sizes_str(const TensorSpec& s) {
  std::string out = "[";
  for (size_t d = 0; d < s.sizes.size(); ++d) {
    std::string dim = s.sizes[d] == kDynamicSize ? std::string(">=2") : std::to_string(s.sizes[d]);
    if (s.sizes[d] == kDynamicSize && d < s.symbols.size() && s.symbols[d] >= 0) dim = "s" + std::to_string(s.symbols[d]) + dim;
    out += (d ? ", " : "") + dim;
  }
  return out + "]";
}

// A symbol's size in this check, or kUnbound.
constexpr int64_t kUnbound = -1;

std::string describe_tensor(const TensorSpec& s) {
  return std::string("tensor(type=") + s.type->tp_name + ", dtype=" + c10::toString(s.dtype) +
         ", device=" + s.device.str() + ", size=" + sizes_str(s) +
         ", stride=" + (s.strides.empty() && !s.sizes.empty() ? std::string("contiguous") : strides_str(s)) +
         ", requires_grad=" + (s.requires_grad ? "True" : "False") + ")";
}

// The object an IdIs check names (borrowed; None once a weakly held one is gone).
PyObject* id_target(const Check& c) { return c.weak ? PyWeakref_GET_OBJECT(c.expected) : c.expected; }

std::string describe_check(const Check& c) {
  switch (c.kind) {
    case CheckKind::TypeIs: return "type is " + std::string(reinterpret_cast<PyTypeObject*>(c.expected)->tp_name);
    case CheckKind::IdIs: return "is " + repr(id_target(c)) + (c.weak ? " (held weakly)" : "") + (c.parts ? " with the same code and defaults" : "");
    case CheckKind::Equals: return "== " + repr(c.expected);
    case CheckKind::Tensor: return "matches " + describe_tensor(c.tensor);
    case CheckKind::Instance:
      return "type is " + std::string(reinterpret_cast<PyTypeObject*>(c.expected)->tp_name) + " (input " +
             std::to_string(c.alias_slot) + ")";
    case CheckKind::SameAs: return "is input " + std::to_string(c.alias_slot);
    case CheckKind::LenIs: return "has length " + std::to_string(c.length);
    case CheckKind::DictKeys: return "has keys " + repr(c.expected) + " in this order";
    case CheckKind::Lacks: return "has no key '" + std::string(PyUnicode_AsUTF8(c.name)) + "'";
    case CheckKind::FunctionParts:
      return "is a function of code " + repr(PyTuple_GET_ITEM(c.parts, 0)) + " with the same defaults and globals";
    case CheckKind::TypeAttr: {
      const std::string name = PyUnicode_AsUTF8(c.name);
      if (!c.expected) return "has no attribute '" + name + "'";
      return "." + name + " is its class's " + repr(c.expected) + (Py_TYPE(c.expected)->tp_descr_set ? "" : ", not its own");
    }
  }
  return "?";
}

// Returns a new reference to the accessed object, or nullptr (no exception left set).
// `parent` is borrowed.
PyObject* access(const Accessor& a, PyObject* parent, const GuardFrame& f) {
  PyObject* out = nullptr;
  switch (a.kind) {
    case AccessKind::Local:
      out = f.fast_locals[a.index];
      Py_XINCREF(out);
      return out;
    case AccessKind::Global:
    case AccessKind::Builtin: {
      PyObject* dict = a.kind == AccessKind::Global ? f.globals : f.builtins;
      if (!dict) return nullptr;
      out = PyDict_GetItemWithError(dict, a.key);
      if (!out) PyErr_Clear();
      Py_XINCREF(out);
      return out;
    }
    case AccessKind::Closure: {
      if (!f.closure || a.index >= PyTuple_GET_SIZE(f.closure)) return nullptr;
      out = PyCell_GET(PyTuple_GET_ITEM(f.closure, a.index));
      Py_XINCREF(out);
      return out;
    }
    case AccessKind::Attr:
      if (PyModule_CheckExact(parent)) {
        out = PyDict_GetItemWithError(PyModule_GetDict(parent), a.key);
        if (!out) PyErr_Clear();
        Py_XINCREF(out);
        return out;
      }
      // A non-leaf tensor's '.grad': its getter warns (eager warns at each read), and the trace
      // read '.grad' of a leaf only (symbolic/attributes.cpp): the guard fails without reading.
      if (THPVariable_Check(parent) && a.name == "grad" && !THPVariable_Unpack(parent).is_leaf()) return nullptr;
      out = PyObject_GetAttr(parent, a.key);
      if (!out) PyErr_Clear();
      return out;
    case AccessKind::DictItem: {
      if (!PyDict_Check(parent)) return nullptr;
      PyObject* key = a.key;
      if (PyWeakref_CheckRef(key)) {  // a key held weakly (a tensor: Accessor::object)
        key = PyWeakref_GetObject(key);
        if (key == Py_None) return nullptr;
      }
      out = PyDict_GetItemWithError(parent, key);
      if (!out) PyErr_Clear();
      Py_XINCREF(out);
      return out;
    }
    case AccessKind::Const:
      return Py_XNewRef(a.object);
    case AccessKind::Item:
      if (PyTuple_Check(parent)) {  // a namedtuple too: the trace wraps only those indexing as tuple does
        if (a.index >= PyTuple_GET_SIZE(parent)) return nullptr;
        out = PyTuple_GET_ITEM(parent, a.index);
      } else if (PyList_Check(parent)) {  // a plain list subclass too: its type is guarded first
        if (a.index >= PyList_GET_SIZE(parent)) return nullptr;
        out = PyList_GET_ITEM(parent, a.index);
      }
      Py_XINCREF(out);
      return out;
  }
  return nullptr;
}

// Strides equal, except where the spec leaves one free (kAnyStride: a dim of size 1 whose stride
// nothing the graph returns depends on; see add_tensor).
bool same_strides(c10::IntArrayRef strides, const std::vector<int64_t>& expected) {
  if (strides.size() != expected.size()) return false;
  for (size_t d = 0; d < strides.size(); ++d)
    if (expected[d] != kAnyStride && strides[d] != expected[d]) return false;
  return true;
}

bool tensor_matches(PyObject* obj, const TensorSpec& s, int64_t* symbol_sizes, std::string* why) {
  if (Py_TYPE(obj) != s.type) {
    if (why) *why = std::string("expected ") + s.type->tp_name + ", got " + Py_TYPE(obj)->tp_name;
    return false;
  }
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (t.scalar_type() != s.dtype) {
    if (why) *why = std::string("dtype ") + c10::toString(t.scalar_type()) + " != " + c10::toString(s.dtype);
    return false;
  }
  if (t.device() != s.device) {
    if (why) *why = "device " + t.device().str() + " != " + s.device.str();
    return false;
  }
  if (s.strides.empty() && !s.sizes.empty()) {  // dynamic sizes, row-major
    const c10::IntArrayRef sizes = t.sizes(), strides = t.strides();
    bool ok = sizes.size() == s.sizes.size();
    int64_t expected = 1;
    for (size_t d = sizes.size(); ok && d-- > 0;) {
      ok = s.sizes[d] == kDynamicSize ? sizes[d] >= 2 : sizes[d] == s.sizes[d];
      if (ok && sizes[d] != 1) ok = strides[d] == expected;
      expected *= sizes[d];
      const int32_t sym = d < s.symbols.size() ? s.symbols[d] : -1;
      if (ok && sym >= 0) {  // bound by the first dim that names it; the others must agree
        int64_t& bound = symbol_sizes[sym];
        if (bound != kUnbound && bound != sizes[d]) {
          if (why) *why = "size " + list_str(sizes) + ": dim " + std::to_string(d) + " must equal s" + std::to_string(sym) + " = " + std::to_string(bound);
          return false;
        }
        bound = sizes[d];
      }
    }
    if (!ok) {
      if (why) *why = "size " + list_str(sizes) + " stride " + list_str(strides) + " is not " + sizes_str(s) + " contiguous";
      return false;
    }
  } else if (t.sizes() != c10::IntArrayRef(s.sizes)) {
    if (why) *why = "size " + list_str(t.sizes()) + " != " + list_str(s.sizes);
    return false;
  } else if (!same_strides(t.strides(), s.strides)) {
    if (why) *why = "stride " + list_str(t.strides()) + " != " + strides_str(s);
    return false;
  }
  if (t.requires_grad() != s.requires_grad) {
    if (why) *why = std::string("requires_grad ") + (t.requires_grad() ? "True" : "False") + " changed";
    return false;
  }
  if (t.key_set().raw_repr() != s.dispatch_keys) {
    if (why) *why = "dispatch keys changed";
    return false;
  }
  return true;
}

// What a function call runs besides the function object: its code and its default arguments
// (`f.__code__ = ...` and `f.__defaults__ = ...` keep the object).
PyObject* function_parts(PyObject* fn) {
  auto* f = reinterpret_cast<PyFunctionObject*>(fn);
  return PyTuple_Pack(3, f->func_code, f->func_defaults ? f->func_defaults : Py_None,
                      f->func_kwdefaults ? f->func_kwdefaults : Py_None);
}

bool function_parts_match(PyObject* fn, PyObject* parts) {
  auto* f = reinterpret_cast<PyFunctionObject*>(fn);
  return f->func_code == PyTuple_GET_ITEM(parts, 0) &&
         (f->func_defaults ? f->func_defaults : Py_None) == PyTuple_GET_ITEM(parts, 1) &&
         (f->func_kwdefaults ? f->func_kwdefaults : Py_None) == PyTuple_GET_ITEM(parts, 2);
}

bool check_one(const Check& c, PyObject* obj, PyObject* const* alias_table, int64_t* symbol_sizes, std::string* why) {
  switch (c.kind) {
    case CheckKind::TypeIs:
    case CheckKind::Instance:
      if (reinterpret_cast<PyObject*>(Py_TYPE(obj)) == c.expected) return true;
      if (why) *why = std::string("type is ") + Py_TYPE(obj)->tp_name;
      return false;
    case CheckKind::IdIs:
      if (obj == id_target(c)) {
        if (!c.parts || function_parts_match(obj, c.parts)) return true;
        if (why) *why = "its __code__ or defaults were replaced";
        return false;
      }
      if (why) *why = "is now " + repr(obj);
      return false;
    case CheckKind::FunctionParts: {
      if (PyFunction_Check(obj)) {
        auto* f = reinterpret_cast<PyFunctionObject*>(obj);
        PyObject* defaults = f->func_defaults ? f->func_defaults : Py_None;
        PyObject* want = PyTuple_GET_ITEM(c.parts, 1);
        if (f->func_code == PyTuple_GET_ITEM(c.parts, 0) && f->func_globals == PyTuple_GET_ITEM(c.parts, 3) &&
            !f->func_kwdefaults && (defaults == want || (defaults != Py_None && want != Py_None && strict_equal(defaults, want))))
          return true;
      }
      if (why) *why = "is now " + repr(obj);
      return false;
    }
    case CheckKind::Equals:
      if (strict_equal(obj, c.expected)) return true;
      if (why) *why = "is now " + repr(obj);
      return false;
    case CheckKind::Lacks: {
      if (!PyDict_Check(obj)) {
        if (why) *why = "is not a dict";
        return false;
      }
      PyObject* own = PyDict_GetItemWithError(obj, c.name);
      if (!own) {
        PyErr_Clear();
        return true;
      }
      if (why) *why = "now has it";
      return false;
    }
    case CheckKind::Tensor:
      return tensor_matches(obj, c.tensor, symbol_sizes, why);
    case CheckKind::SameAs:  // the object is compared in eval_node, whichever path comes first
      (void)alias_table;
      return true;
    case CheckKind::DictKeys: {
      const Py_ssize_t n = PyTuple_GET_SIZE(c.expected);
      bool same = PyDict_Check(obj) && PyDict_GET_SIZE(obj) == n;
      if (same && PyODict_CheckExact(obj)) {
        // An OrderedDict's order is its own list (move_to_end), not its dict's: iterate it.
        PyObject* keys = PySequence_List(obj);
        if (!keys) PyErr_Clear();
        same = keys && PyList_GET_SIZE(keys) == n;
        for (Py_ssize_t i = 0; same && i < n; ++i) same = strict_equal(PyList_GET_ITEM(keys, i), PyTuple_GET_ITEM(c.expected, i));
        Py_XDECREF(keys);
      } else {
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        for (Py_ssize_t i = 0; same && PyDict_Next(obj, &pos, &key, &value); ++i) {
          same = strict_equal(key, PyTuple_GET_ITEM(c.expected, i));
        }
      }
      if (same) return true;
      if (why) *why = "has other keys or another order";
      return false;
    }
    case CheckKind::TypeAttr: {
      PyObject* found = _PyType_Lookup(Py_TYPE(obj), c.name);  // borrowed; the method cache
      if (found != c.expected) {
        if (why) *why = found ? "its class now has ." + std::string(PyUnicode_AsUTF8(c.name)) + " = " + repr(found)
                              : "its class no longer has ." + std::string(PyUnicode_AsUTF8(c.name));
        return false;
      }
      if (c.parts && !function_parts_match(found, c.parts)) {
        if (why) *why = "its method's __code__ or defaults were replaced";
        return false;
      }
      if (found && Py_TYPE(found)->tp_descr_set) return true;  // a data descriptor wins over the dict
      PyObject** dictptr = _PyObject_GetDictPtr(obj);
      if (!dictptr || !*dictptr) return true;
      PyObject* own = PyDict_GetItemWithError(*dictptr, c.name);
      if (!own) {
        PyErr_Clear();
        return true;
      }
      if (why) *why = "has its own attribute ." + std::string(PyUnicode_AsUTF8(c.name));
      return false;
    }
    case CheckKind::LenIs: {
      Py_ssize_t n = PyObject_Length(obj);
      if (n < 0) PyErr_Clear();
      if (n == c.length) return true;
      if (why) *why = "has length " + std::to_string(n);
      return false;
    }
  }
  return false;
}

// constant + sum coef * size, compared with 0; false when a symbol is unbound or it overflows.
bool relation_holds(const SizeRelation& r, const int64_t* sizes, int symbols) {
  int64_t v = r.constant;
  for (const auto& [s, coef] : r.terms) {
    if (s >= symbols || sizes[s] == kUnbound) return false;
    int64_t t = 0;
    if (__builtin_mul_overflow(coef, sizes[s], &t) || __builtin_add_overflow(v, t, &v)) return false;
  }
  switch (r.kind) {
    case SizeRelation::Kind::Ge: return v >= 0;
    case SizeRelation::Kind::Eq: return v == 0;
    case SizeRelation::Kind::Ne: return v != 0;
  }
  return false;
}

struct EvalState {
  const GuardFrame& frame;
  GuardFailure* why;
  PyObject** alias_table;  // borrowed tensors and instances by alias slot
  int64_t* symbol_sizes;   // by size symbol: its size in this call, or kUnbound
};

bool eval_node(const GuardNode& n, PyObject* parent, const PathLink* parent_link, EvalState& st) {
  PathLink link{&n.accessor, parent_link};
  PyObject* obj = access(n.accessor, parent, st.frame);
  if (!obj) {
    if (st.why) st.why->description = format_path(&link) + " is missing";
    return false;
  }
  bool ok = true;
  for (const Check& c : n.checks) {
    std::string detail;
    if (!check_one(c, obj, st.alias_table, st.symbol_sizes, st.why ? &detail : nullptr)) {
      if (st.why) st.why->description = format_path(&link) + " " + describe_check(c) + ": " + detail;
      ok = false;
      break;
    }
    if (c.kind == CheckKind::Tensor || c.kind == CheckKind::Instance || c.kind == CheckKind::SameAs) {
      // One object reached by several paths: the first path evaluated (which need not be the
      // first one traced) records it, the others must find the same. Kept alive by its owner.
      PyObject*& slot = st.alias_table[c.alias_slot];
      if (slot && slot != obj) {
        if (st.why) st.why->description = format_path(&link) + " is input " + std::to_string(c.alias_slot) + ": is a different object";
        ok = false;
        break;
      }
      slot = obj;
    }
  }
  for (size_t i = 0; ok && i < n.children.size(); ++i) ok = eval_node(*n.children[i], obj, &link, st);
  Py_DECREF(obj);
  return ok;
}

void describe_node(const GuardNode& n, const PathLink* parent_link, std::vector<std::string>& out) {
  PathLink link{&n.accessor, parent_link};
  for (const Check& c : n.checks) out.push_back(format_path(&link) + " " + describe_check(c));
  for (const auto& child : n.children) describe_node(*child, &link, out);
}

size_t count_node(const GuardNode& n) {
  size_t k = n.checks.size();
  for (const auto& child : n.children) k += count_node(*child);
  return k;
}

void release_node(GuardNode& n) {
  Py_CLEAR(n.accessor.key);
  Py_CLEAR(n.accessor.object);
  for (Check& c : n.checks) {
    Py_CLEAR(c.expected);
    Py_CLEAR(c.name);
    Py_CLEAR(c.parts);
  }
  for (auto& child : n.children) release_node(*child);
}

bool same_accessor(const Accessor& a, const Accessor& b) {
  return a.kind == b.kind && a.index == b.index && a.name == b.name && a.object == b.object;
}

}  // namespace

GuardTree::~GuardTree() {
  if (!Py_IsInitialized()) return;  // interpreter already gone: leak rather than crash
  PyGILState_STATE g = PyGILState_Ensure();
  for (auto& r : roots_) release_node(*r);
  for (PyObject* n : absent_globals_) Py_DECREF(n);
  PyGILState_Release(g);
}

GuardNode* GuardTree::node(GuardNode* parent, const Accessor& accessor) {
  auto& list = parent ? parent->children : roots_;
  for (auto& n : list)
    if (same_accessor(n->accessor, accessor)) return n.get();
  list.push_back(std::make_unique<GuardNode>());
  Accessor& a = list.back()->accessor;
  a = accessor;
  // A dict item under a key other than a str is looked up by that key object.
  a.key = a.kind == AccessKind::DictItem && a.object ? Py_NewRef(a.object) : interned_name(a.name);
  Py_XINCREF(a.object);
  return list.back().get();
}

void GuardTree::add_type_is(GuardNode* n, PyTypeObject* type) {
  for (const Check& c : n->checks)
    if (c.kind == CheckKind::TypeIs) return;
  Check c;
  c.kind = CheckKind::TypeIs;
  c.expected = Py_NewRef(reinterpret_cast<PyObject*>(type));
  n->checks.push_back(c);
}

void GuardTree::add_id_is(GuardNode* n, PyObject* obj) {
  for (const Check& c : n->checks)
    if (c.kind == CheckKind::IdIs) return;
  Check c;
  c.kind = CheckKind::IdIs;
  c.weak = PyType_SUPPORTS_WEAKREFS(Py_TYPE(obj));
  c.expected = c.weak ? PyWeakref_NewRef(obj, nullptr) : nullptr;
  if (!c.expected) {
    PyErr_Clear();
    c.weak = false;
    c.expected = Py_NewRef(obj);
  }
  if (PyFunction_Check(obj)) c.parts = function_parts(obj);
  n->checks.push_back(c);
}

void GuardTree::add_function_parts(GuardNode* n, PyObject* fn) {
  for (const Check& c : n->checks)
    if (c.kind == CheckKind::FunctionParts) return;
  auto* f = reinterpret_cast<PyFunctionObject*>(fn);
  Check c;
  c.kind = CheckKind::FunctionParts;
  c.parts = PyTuple_Pack(4, f->func_code, f->func_defaults ? f->func_defaults : Py_None, Py_None, f->func_globals);
  n->checks.push_back(c);
}

void GuardTree::add_equals(GuardNode* n, PyObject* value) {
  for (const Check& c : n->checks)
    if (c.kind == CheckKind::Equals) return;
  Check c;
  c.kind = CheckKind::Equals;
  c.expected = Py_NewRef(value);
  n->checks.push_back(c);
}

int GuardTree::add_tensor(GuardNode* n, PyObject* tensor, const std::vector<int64_t>& dynamic, const std::vector<int32_t>& symbols,
                          bool size_one_strides_free) {
  for (const Check& c : n->checks)
    if (c.kind == CheckKind::Tensor) return c.alias_slot;
  const at::Tensor& t = THPVariable_Unpack(tensor);
  Check c;
  c.kind = CheckKind::Tensor;
  c.tensor.type = Py_TYPE(tensor);
  c.tensor.dtype = t.scalar_type();
  c.tensor.device = t.device();
  c.tensor.sizes = t.sizes().vec();
  c.tensor.strides = t.strides().vec();
  if (size_one_strides_free)
    for (size_t d = 0; d < c.tensor.strides.size(); ++d)
      if (c.tensor.sizes[d] == 1) c.tensor.strides[d] = kAnyStride;
  for (int64_t d : dynamic) c.tensor.sizes.at(static_cast<size_t>(d)) = kDynamicSize;
  if (!dynamic.empty()) c.tensor.strides.clear();
  if (!symbols.empty()) {
    if (symbols.size() != dynamic.size()) throw InternalError("add_tensor: one symbol per dynamic dim");
    c.tensor.symbols.assign(c.tensor.sizes.size(), -1);
    for (size_t i = 0; i < dynamic.size(); ++i) {
      c.tensor.symbols.at(static_cast<size_t>(dynamic[i])) = symbols[i];
      symbols_ = std::max(symbols_, symbols[i] + 1);
    }
  }
  c.tensor.requires_grad = t.requires_grad();
  c.tensor.dispatch_keys = t.key_set().raw_repr();
  c.alias_slot = alias_slots_++;
  n->checks.push_back(c);
  return c.alias_slot;
}

int GuardTree::add_instance(GuardNode* n, PyObject* instance) {
  for (const Check& c : n->checks)
    if (c.kind == CheckKind::Instance) return c.alias_slot;
  Check c;
  c.kind = CheckKind::Instance;
  c.expected = Py_NewRef(reinterpret_cast<PyObject*>(Py_TYPE(instance)));
  c.alias_slot = alias_slots_++;
  n->checks.push_back(c);
  return c.alias_slot;
}

void GuardTree::add_len_is(GuardNode* n, Py_ssize_t length) {
  Check c;
  c.kind = CheckKind::LenIs;
  c.length = length;
  n->checks.push_back(c);
}

void GuardTree::add_dict_keys(GuardNode* n, PyObject* dict) {
  for (const Check& c : n->checks)
    if (c.kind == CheckKind::DictKeys) return;
  Check c;
  c.kind = CheckKind::DictKeys;
  PyObject* keys = PySequence_List(dict);  // iteration order (an OrderedDict's own, not its dict's)
  c.expected = keys ? PyList_AsTuple(keys) : nullptr;
  Py_XDECREF(keys);
  if (!c.expected) {
    PyErr_Clear();
    return;  // not a dict: the type check beside it fails instead
  }
  n->checks.push_back(c);
}

void GuardTree::add_type_attr(GuardNode* n, const std::string& name, PyObject* found) {
  for (const Check& c : n->checks)
    if (c.kind == CheckKind::TypeAttr && name == PyUnicode_AsUTF8(c.name)) return;
  Check c;
  c.kind = CheckKind::TypeAttr;
  c.name = PyUnicode_InternFromString(name.c_str());
  c.expected = Py_XNewRef(found);
  if (found && PyFunction_Check(found)) c.parts = function_parts(found);
  n->checks.push_back(c);
}

void GuardTree::add_lacks(GuardNode* n, const std::string& key) {
  for (const Check& c : n->checks)
    if (c.kind == CheckKind::Lacks && key == PyUnicode_AsUTF8(c.name)) return;
  Check c;
  c.kind = CheckKind::Lacks;
  c.name = PyUnicode_InternFromString(key.c_str());
  n->checks.push_back(c);
}

void GuardTree::add_same_as(GuardNode* n, int alias_slot) {
  // The node records or compares that slot already (a path read again: an optimizer step reads
  // `opt.state` once per parameter): a second check would compare the object with itself.
  for (const Check& c : n->checks)
    if (c.alias_slot == alias_slot) return;
  Check c;
  c.kind = CheckKind::SameAs;
  c.alias_slot = alias_slot;
  n->checks.push_back(c);
}

void GuardTree::add_global_absent(const std::string& name) {
  for (PyObject* n : absent_globals_)
    if (name == PyUnicode_AsUTF8(n)) return;
  absent_globals_.push_back(PyUnicode_InternFromString(name.c_str()));
}

namespace {

// Walks a dict's items in its iteration order: an OrderedDict keeps its own order (move_to_end)
// beside the dict's, and its C iterator follows it.
class DictCursor {
 public:
  explicit DictCursor(PyObject* d) : dict_(d), iter_(PyODict_Check(d) ? PyObject_GetIter(d) : nullptr) {}
  ~DictCursor() {
    Py_XDECREF(held_);
    Py_XDECREF(iter_);
  }
  DictCursor(const DictCursor&) = delete;
  DictCursor& operator=(const DictCursor&) = delete;
  bool next(PyObject** key, PyObject** value) {
    if (!iter_) return PyDict_Next(dict_, &pos_, key, value);
    Py_CLEAR(held_);
    held_ = PyIter_Next(iter_);
    if (!held_) return false;
    *key = held_;
    *value = PyDict_GetItemWithError(dict_, held_);
    return *value != nullptr;
  }

 private:
  PyObject* dict_;
  PyObject* iter_;
  PyObject* held_ = nullptr;
  Py_ssize_t pos_ = 0;
};

// Types whose == compares values in C.
bool is_value_type(PyTypeObject* tp) {
  return tp == &PyLong_Type || tp == &PyUnicode_Type || tp == &PyBytes_Type || tp == &PyComplex_Type ||
         tp == &PySlice_Type || tp == &PyRange_Type || PyType_IsSubtype(tp, &THPDeviceType);
}

bool dict_equal(PyObject* a, PyObject* b) {
  if (PyDict_GET_SIZE(a) != PyDict_GET_SIZE(b)) return false;
  DictCursor ca(a), cb(b);
  PyObject *ka, *va, *kb, *vb;
  for (Py_ssize_t i = 0; i < PyDict_GET_SIZE(a); ++i) {
    if (!ca.next(&ka, &va) || !cb.next(&kb, &vb)) {
      PyErr_Clear();
      return false;
    }
    if (!strict_equal(ka, kb) || !strict_equal(va, vb)) return false;
  }
  return true;
}

}  // namespace

bool strict_equal(PyObject* a, PyObject* b) {
  if (a == b) return true;
  if (Py_TYPE(a) != Py_TYPE(b)) {
    // A dict subclass's contents are snapshotted as a plain dict (IdIs keeps its type).
    return PyDict_Check(a) && PyDict_CheckExact(b) && dict_equal(a, b);
  }
  if (PyFloat_CheckExact(a)) {
    const double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
    return x == y && std::signbit(x) == std::signbit(y);
  }
  if (PyTuple_Check(a) || PyList_Check(a)) {
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(a);
    if (PySequence_Fast_GET_SIZE(b) != n) return false;
    for (Py_ssize_t i = 0; i < n; ++i)
      if (!strict_equal(PySequence_Fast_GET_ITEM(a, i), PySequence_Fast_GET_ITEM(b, i))) return false;
    return true;
  }
  if (PyDict_Check(a)) return dict_equal(a, b);
  if (PyAnySet_Check(a)) {
    if (PySet_GET_SIZE(a) != PySet_GET_SIZE(b)) return false;
    Py_ssize_t pa = 0, pb = 0;
    PyObject *ka, *kb;
    Py_hash_t ha, hb;
    while (_PySet_NextEntry(a, &pa, &ka, &ha) && _PySet_NextEntry(b, &pb, &kb, &hb))
      if (!strict_equal(ka, kb)) return false;
    return true;
  }
  if (!is_value_type(Py_TYPE(a))) return false;  // other objects: the very same one
  const int eq = PyObject_RichCompareBool(a, b, Py_EQ);
  if (eq < 0) PyErr_Clear();
  return eq == 1;
}

bool python_mode_active() {
  return at::impl::PythonTorchFunctionTLS::stack_len() > 0 || c10::impl::TorchDispatchModeTLS::stack_len() > 0;
}

void GuardTree::guard_global_state() {
  has_global_state_ = true;
  grad_enabled_ = at::GradMode::is_enabled();
  default_dtype_ = c10::typeMetaToScalarType(c10::get_default_dtype());
  autocast_ = AutocastState::current();
  deterministic_ = at::globalContext().deterministicAlgorithms();
}

void GuardTree::guard_no_record_function_observers() { no_observers_ = true; }

bool GuardTree::check(const GuardFrame& frame, GuardFailure* why) const {
  if (no_observers_ && at::hasCallbacks()) {
    if (why) why->description = "no RecordFunction observer (profiler) is installed";
    return false;
  }
  if (has_global_state_) {
    if (at::GradMode::is_enabled() != grad_enabled_) {
      if (why) why->description = std::string("grad_mode == ") + (grad_enabled_ ? "True" : "False");
      return false;
    }
    if (c10::typeMetaToScalarType(c10::get_default_dtype()) != default_dtype_) {
      if (why) why->description = std::string("default_dtype == ") + c10::toString(default_dtype_);
      return false;
    }
    if (AutocastState::current() != autocast_) {  // the trace cast as autocast did then
      if (why) why->description = autocast_.describe();
      return false;
    }
    if (at::globalContext().deterministicAlgorithms() != deterministic_) {  // the trace may fold it
      if (why) why->description = std::string("deterministic_algorithms == ") + (deterministic_ ? "True" : "False");
      return false;
    }
    if (python_mode_active()) {  // likewise with no TorchFunctionMode or TorchDispatchMode
      if (why) why->description = "no torch function or dispatch mode is active";
      return false;
    }
  }
  for (PyObject* n : absent_globals_) {
    if (frame.globals && PyDict_GetItemWithError(frame.globals, n)) {
      if (why) why->description = std::string("G['") + PyUnicode_AsUTF8(n) + "'] now shadows the builtin";
      return false;
    }
    PyErr_Clear();
  }
  constexpr int kInline = 16;
  PyObject* inline_table[kInline];
  std::vector<PyObject*> heap_table;
  PyObject** table = inline_table;
  if (alias_slots_ > kInline) {
    heap_table.resize(alias_slots_);
    table = heap_table.data();
  }
  std::fill(table, table + alias_slots_, nullptr);
  int64_t inline_sizes[kInline];
  std::vector<int64_t> heap_sizes;
  int64_t* sizes = inline_sizes;
  if (symbols_ > kInline) {
    heap_sizes.resize(symbols_);
    sizes = heap_sizes.data();
  }
  std::fill(sizes, sizes + symbols_, kUnbound);
  EvalState st{frame, why, table, sizes};
  for (const auto& r : roots_)
    if (!eval_node(*r, nullptr, nullptr, st)) return false;
  for (const SizeRelation& rel : relations_)
    if (!relation_holds(rel, sizes, symbols_)) {
      if (why) {
        why->description = rel.str() + ":";
        for (const auto& [s, coef] : rel.terms)
          why->description += " s" + std::to_string(s) + " = " + (s < symbols_ && sizes[s] != kUnbound ? std::to_string(sizes[s]) : "?");
      }
      return false;
    }
  // Aliasing: tensors and instances that were distinct objects at compile time must still be.
  // Pairwise for a few; sorted beyond (an optimizer's step guards some 300 tensors: pairwise, the
  // comparisons were 40% of its guard check).
  bool distinct = true;
  if (alias_slots_ <= kInline) {
    for (int i = 0; i < alias_slots_ && distinct; ++i)
      for (int j = i + 1; j < alias_slots_ && distinct; ++j) distinct = table[i] != table[j];
  } else {
    std::vector<PyObject*> sorted(table, table + alias_slots_);
    std::sort(sorted.begin(), sorted.end());
    distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
  }
  if (!distinct && why) {
    for (int i = 0; i < alias_slots_; ++i)
      for (int j = i + 1; j < alias_slots_; ++j)
        if (table[i] == table[j] && why->description.empty())
          why->description = "inputs " + std::to_string(i) + " and " + std::to_string(j) + " are now the same object";
  }
  return distinct;
}

void GuardTree::add_relation(SizeRelation r) {
  for (const auto& [s, coef] : r.terms) symbols_ = std::max(symbols_, s + 1);
  relations_.push_back(std::move(r));
}

std::string SizeRelation::str() const {
  // Written with positive coefficients where they all have one sign: "s0 <= 20", not "-s0 + 20 >= 0".
  bool all_negative = !terms.empty();
  for (const auto& t : terms) all_negative = all_negative && t.second < 0;
  const int64_t sign = all_negative ? -1 : 1;
  std::string lhs;
  for (const auto& [s, coef] : terms) {
    const int64_t c = coef * sign;
    lhs += lhs.empty() ? (c < 0 ? "-" : "") : (c < 0 ? " - " : " + ");
    if (c != 1 && c != -1) lhs += std::to_string(c < 0 ? -c : c) + "*";
    lhs += "s" + std::to_string(s);
  }
  const char* op = kind == Kind::Eq ? " == " : kind == Kind::Ne ? " != " : all_negative ? " <= " : " >= ";
  return lhs + op + std::to_string(-constant * sign);
}

std::vector<std::string> GuardTree::describe() const {
  std::vector<std::string> out;
  if (has_global_state_) {
    out.push_back(std::string("grad_mode == ") + (grad_enabled_ ? "True" : "False"));
    out.push_back(std::string("default_dtype == ") + c10::toString(default_dtype_));
    out.push_back(autocast_.describe());
    out.push_back(std::string("deterministic_algorithms == ") + (deterministic_ ? "True" : "False"));
  }
  if (no_observers_) out.push_back("no RecordFunction observer (profiler) is installed");
  for (PyObject* n : absent_globals_) out.push_back(std::string("G['") + PyUnicode_AsUTF8(n) + "'] is absent");
  for (const auto& r : roots_) describe_node(*r, nullptr, out);
  if (alias_slots_ > 1) out.push_back("the " + std::to_string(alias_slots_) + " inputs are distinct objects");
  for (const SizeRelation& r : relations_) out.push_back(r.str());
  return out;
}

size_t GuardTree::size() const {
  size_t k = (has_global_state_ ? 4 : 0) + (no_observers_ ? 1 : 0);
  for (const auto& r : roots_) k += count_node(*r);
  return k + relations_.size();
}

}  // namespace fastdyn::runtime
