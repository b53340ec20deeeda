// symbolic/operators.cpp — operators, subscripts, iteration, unpacking and truth values of
// symbolic values: folded on constants, recorded through the op table on tensors, answered from
// the items of containers built in the trace.
#include <torch/csrc/Device.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <unordered_map>
#include <map>
#include <functional>
#include <cstring>
#include <optional>

#include "codegen/shapes/propagate.h"
#include "runtime/errors.h"
#include "symbolic/py_ops.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {

namespace {
// The name of the i-th submodule of an nn.Sequential or nn.ModuleList: its key in _modules ("0",
// "1", ... unless a Sequential was built from an OrderedDict of names), which is what indexing
// and iteration reach (they walk _modules.values()).
std::string module_key(PyObject* container, Py_ssize_t i) {
  PyOwned modules(PyObject_GetAttrString(container, "_modules"));
  if (!modules.p || !PyDict_Check(modules.p)) {
    PyErr_Clear();
    throw Unsupported("a module container without _modules");
  }
  Py_ssize_t pos = 0, k = 0;
  PyObject *key, *value;
  while (PyDict_Next(modules.p, &pos, &key, &value))
    if (k++ == i) {
      if (!PyUnicode_Check(key)) throw Unsupported("a submodule name that is not a str");
      return PyUnicode_AsUTF8(key);
    }
  throw Unsupported("module index out of range");
}
}  // namespace

using codegen::Family;

// ---------------------------------------------------------------------------------------------
// Operators, subscripts, iteration

namespace {

bool is_plain_int(const SymValue& v) {
  return v.kind == SymValue::Kind::Constant && PyLong_Check(v.obj) && !PyBool_Check(v.obj);
}

// Whether v is, or is a tuple/list holding, a size-derived int (values.h's SizeReadHook).
bool holds_size(const SymValue& v) {
  if (v.size) return true;
  if (v.kind != SymValue::Kind::Tuple && v.kind != SymValue::Kind::List) return false;
  for (const SymValue& i : v.seq())
    if (i.size) return true;
  return false;
}

}  // namespace

// +, -, * of size-derived ints (with each other or with ints), and // and % by a positive int:
// the result keeps its expression. Anything else reads the numbers (binary() below).
std::optional<SymValue> Tracer::size_arithmetic(const std::string& sym, const SymValue& a, const SymValue& b) {
  if (!is_plain_int(a) || !is_plain_int(b)) return std::nullopt;
  std::string op = sym;
  if (op.size() > 1 && op.back() == '=' && op != "==" && op != "<=" && op != ">=" && op != "!=") op.pop_back();  // +=
  using codegen::shapes::SizeExpr;
  auto expr = [&](const SymValue& v) { return v.size ? codegen::shapes::live(result_.graph, *v.size) : SizeExpr(PyLong_AsLongLong(v.obj)); };
  SizeExpr e;
  if (op == "+") e = expr(a) + expr(b);
  else if (op == "-") e = expr(a) - expr(b);
  else if (op == "*") e = expr(a) * expr(b);
  else if ((op == "//" || op == "%") && !b.size && PyLong_AsLongLong(b.obj) > 0)
    e = op == "//" ? floordiv(expr(a), expr(b)) : mod(expr(a), expr(b));
  else return std::nullopt;
  PyOwned r(fold_binary(op, a.obj, b.obj));
  if (!r.p) {
    PyErr_Clear();
    return std::nullopt;
  }
  SymValue out = constant(r.p);
  if (!e.is_constant()) out.size = std::make_shared<const SizeExpr>(std::move(e));
  return out;
}

// A comparison of size-derived ints that holds, or fails, at every size the guards admit (each
// live symbol is 2 or more): s0 == s0, s0 + 1 > s0, s0 == 1, s0 >= 2 fold without reading a
// number. The difference's terms over symbols all positive (or all negative) make it monotone,
// so its value with every symbol at 2 bounds it. Anything else: nullopt (the numbers are read).
std::optional<SymValue> Tracer::size_comparison(const std::string& op, const SymValue& a, const SymValue& b) {
  if (!is_plain_int(a) || !is_plain_int(b)) return std::nullopt;
  static const char* const ops[] = {"==", "!=", "<", "<=", ">", ">="};
  if (std::find_if(std::begin(ops), std::end(ops), [&](const char* o) { return op == o; }) == std::end(ops)) return std::nullopt;
  using codegen::shapes::SizeExpr;
  auto expr = [&](const SymValue& v) { return v.size ? codegen::shapes::live(result_.graph, *v.size) : SizeExpr(PyLong_AsLongLong(v.obj)); };
  const SizeExpr d = expr(a) - expr(b);
  const SizeExpr rest = d - SizeExpr(d.substitute([](codegen::shapes::SymbolId) { return SizeExpr(0); }));
  const std::optional<int64_t> at_two = d.evaluate(std::vector<int64_t>(result_.graph.symbols.size(), 2));
  std::optional<int64_t> lo, hi;  // bounds of d over every admitted size
  if (d.is_constant()) lo = hi = d.constant();
  else if (at_two && rest.nonnegative()) lo = at_two;
  else if (at_two && (-rest).nonnegative()) hi = at_two;
  std::optional<bool> r;
  using codegen::shapes::Relation;
  if (op == "==" || op == "!=") {
    if ((lo && *lo > 0) || (hi && *hi < 0)) r = false;
    else if (lo && hi && *lo == 0 && *hi == 0) r = true;
    if (r && op == "!=") r = !*r;
  } else if (op == "<") {
    if (hi && *hi < 0) r = true; else if (lo && *lo >= 0) r = false;
  } else if (op == "<=") {
    if (hi && *hi <= 0) r = true; else if (lo && *lo > 0) r = false;
  } else if (op == ">") {
    if (lo && *lo > 0) r = true; else if (hi && *hi <= 0) r = false;
  } else {
    if (lo && *lo >= 0) r = true; else if (hi && *hi < 0) r = false;
  }
  if (!r && d.linear()) {
    // Not decided by the admitted sizes, but linear: the answer at the traced sizes holds for
    // the sizes where the relation that gives it holds, and the guards check that relation
    // (s0 >= 21 false: s0 <= 20), so the sizes stay symbols. Dynamo's range guards, in C++.
    const std::optional<int64_t> at = d.evaluate(codegen::shapes::hints(result_.graph));
    if (!at) return std::nullopt;
    const int64_t v = *at;
    r = op == "==" ? v == 0 : op == "!=" ? v != 0 : op == "<" ? v < 0 : op == "<=" ? v <= 0 : op == ">" ? v > 0 : v >= 0;
    // The relation that decides this comparison, as it came out here.
    Relation rel;
    if (op == "==" || op == "!=") rel = v == 0 ? Relation::eq(d, 0) : Relation::ne(d, 0);
    else if (op == "<" || op == ">=") rel = v >= 0 ? Relation::ge(d, 0) : Relation::ge(-d - SizeExpr(1), 0);
    else rel = v > 0 ? Relation::ge(d - SizeExpr(1), 0) : Relation::ge(-d, 0);  // <=, >
    result_.size_relations.push_back(std::move(rel));
  }
  if (!r) return std::nullopt;
  return constant(*r ? Py_True : Py_False);
}

// x `sym` y on real objects whose operators run no Python: a comparison, or fold_binary's
// arithmetic. New reference, or nullptr with the error set.
static PyObject* compare_or_fold(const std::string& sym, PyObject* x, PyObject* y) {
  static const char* cmp[] = {"<", "<=", "==", "!=", ">", ">="};
  static const int ops[] = {Py_LT, Py_LE, Py_EQ, Py_NE, Py_GT, Py_GE};
  for (int i = 0; i < 6; ++i)
    if (sym == cmp[i]) return PyObject_RichCompare(x, y, ops[i]);
  return fold_binary(sym, x, y);
}

// `a sym b` where an operand is an object made in the trace: Python's binary-operator protocol
// over its class's Python dunders, each inlined. In place, a.__iop__ first; then a.__op__ and
// b.__rop__ (b's first where its class is a proper subclass of a's that defines it); an answer of
// NotImplemented passes on. == and != fall back to identity, as object's do.
SymValue Tracer::object_operator(const std::string& sym, const SymValue& a, const SymValue& b) {
  using K = SymValue::Kind;
  static const std::map<std::string, std::pair<std::string, std::string>> names = {  // forward, reflected
      {"+", {"add", "radd"}}, {"-", {"sub", "rsub"}}, {"*", {"mul", "rmul"}}, {"/", {"truediv", "rtruediv"}},
      {"//", {"floordiv", "rfloordiv"}}, {"%", {"mod", "rmod"}}, {"**", {"pow", "rpow"}}, {"@", {"matmul", "rmatmul"}},
      {"&", {"and", "rand"}}, {"|", {"or", "ror"}}, {"^", {"xor", "rxor"}}, {"<<", {"lshift", "rlshift"}},
      {">>", {"rshift", "rrshift"}}, {"<", {"lt", "gt"}}, {"<=", {"le", "ge"}}, {">", {"gt", "lt"}}, {">=", {"ge", "le"}},
      {"==", {"eq", "eq"}}, {"!=", {"ne", "ne"}}};
  const bool in_place = sym.size() >= 2 && sym.back() == '=' && sym != "==" && sym != "!=" && sym != "<=" && sym != ">=";
  auto it = names.find(in_place ? sym.substr(0, sym.size() - 1) : sym);
  if (it == names.end()) throw Unsupported("operator " + sym + " on " + describe(a) + " and " + describe(b));
  auto dunder = [](const SymValue& v, const std::string& name) -> PyObject* {
    return v.kind == K::Object ? python_dunder(reinterpret_cast<PyTypeObject*>(v.obj), ("__" + name + "__").c_str()) : nullptr;
  };
  auto answered = [](const SymValue& r) { return !(r.is_constant() && r.obj == Py_NotImplemented); };
  if (in_place)
    if (PyObject* f = dunder(a, "i" + it->second.first)) {
      SymValue r = call(constant(f), {a, b}, {});
      if (answered(r)) return r;
    }
  PyObject* fwd = dunder(a, it->second.first);
  PyObject* rev = dunder(b, it->second.second);
  const bool b_first = rev && a.kind == K::Object && b.obj != a.obj &&
                       PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(b.obj), reinterpret_cast<PyTypeObject*>(a.obj));
  for (int pass = 0; pass < 2; ++pass) {
    const bool reflected = (pass == 0) == b_first;
    PyObject* f = reflected ? rev : fwd;
    if (!f) continue;
    SymValue r = reflected ? call(constant(f), {b, a}, {}) : call(constant(f), {a, b}, {});
    if (answered(r)) return r;
  }
  if (sym == "==" || sym == "!=") {  // identity
    const bool same = a.kind == b.kind && a.box == b.box;
    return constant((same == (sym == "==")) ? Py_True : Py_False);
  }
  throw Unsupported("operator " + sym + " on " + describe(a) + " and " + describe(b) + " (TypeError)");
}

SymValue Tracer::binary(const char* symbol, const SymValue& a, const SymValue& b) {
  using K = SymValue::Kind;
  const std::string sym = symbol;
  if (a.size || b.size) {
    if (auto r = size_arithmetic(sym, a, b)) return *r;
    if (auto r = size_comparison(sym, a, b)) return *r;
  }
  if (a.kind == K::Object || b.kind == K::Object) return object_operator(sym, a, b);
  // Sets: on real sets (a Set's own for an in-place operator, copies otherwise).
  if (a.kind == K::Set || b.kind == K::Set) {
    PyOwned x(set_operand(a)), y(set_operand(b));
    if (!x.p || !y.p) throw Unsupported("operator " + sym + " on " + describe(a) + " and " + describe(b));
    static const std::pair<const char*, binaryfunc> in_place[] = {{"|=", PyNumber_InPlaceOr}, {"&=", PyNumber_InPlaceAnd},
                                                                  {"-=", PyNumber_InPlaceSubtract}, {"^=", PyNumber_InPlaceXor}};
    for (const auto& [name, fn] : in_place)
      if (sym == name && a.kind == K::Set) {
        check_not_iterating(a, sym);
        PyOwned r(fn(a.obj, y.p));
        if (!r.p) { PyErr_Clear(); throw Unsupported("operator " + sym + " raised"); }
        return a;
      }
    PyOwned r(compare_or_fold(sym, x.p, y.p));
    if (!r.p) { PyErr_Clear(); throw Unsupported("operator " + sym + " on " + describe(a) + " and " + describe(b) + " raised"); }
    return PySet_CheckExact(r.p) ? set_value(r.p) : constant(r.p);
  }
  // Tuples holding size-derived ints concatenate item by item below (folding would read them).
  const bool sized_concat = (sym == "+" || sym == "+=") && (holds_size(a) || holds_size(b)) &&
                            (a.kind == K::Tuple || a.kind == K::List || b.kind == K::Tuple || b.kind == K::List);
  if (!sized_concat && a.is_python_constant() && b.is_python_constant()) {
    PyOwned x(materialize(a)), y(materialize(b));
    // Keys views (of dicts whose keys compare in C) fold too: set operations on them.
    auto foldable = [](PyObject* o) { return foldable_constant(o) || THPSize_Check(o) || PyDictKeys_Check(o); };
    // Containers holding objects of Python classes compare (and add, ...) with their methods.
    if (!x.p || !y.p || !foldable(x.p) || !foldable(y.p) ||
        ((PyList_Check(x.p) || PyTuple_Check(x.p)) && !holds_only_builtin_values(x.p)) ||
        ((PyList_Check(y.p) || PyTuple_Check(y.p)) && !holds_only_builtin_values(y.p))) {
      // == and != of objects whose types compare in C (enums, types, modules...), and of
      // containers holding only such objects: no user code runs.
      if ((sym == "==" || sym == "!=") && x.p && y.p && compares_in_c(x.p) && compares_in_c(y.p)) {
        PyOwned r(PyObject_RichCompare(x.p, y.p, sym == "==" ? Py_EQ : Py_NE));
        if (r.p) return constant(r.p);
        PyErr_Clear();
      }
      // `int | None`, `str | list[int]`: a union made by type's own __or__ (no metaclass of the
      // user's), a constant like the classes it joins.
      auto joins = [](PyObject* o) { return o == Py_None || Py_IS_TYPE(o, &PyType_Type) || typing_form(o); };
      if (sym == "|" && x.p && y.p && joins(x.p) && joins(y.p) && (x.p != Py_None || y.p != Py_None)) {
        PyOwned r(PyNumber_Or(x.p, y.p));
        if (r.p) return constant(r.p);
        PyErr_Clear();
      }
      throw Unsupported("operator " + sym + " on " + describe(a) + " and " + describe(b));
    }
    PyObject* r = compare_or_fold(sym, x.p, y.p);
    if (!r) {
      PyErr_Clear();
      throw Unsupported("operator " + sym + " on " + describe(a) + " and " + describe(b) + " raised");
    }
    PyOwned owned(r);
    return constant(r);
  }
  // Sequences built in the trace: concatenation and repetition.
  const bool a_seq = a.kind == K::Tuple || a.kind == K::List, b_seq = b.kind == K::Tuple || b.kind == K::List;
  if ((sym == "+" || sym == "+=") && (a_seq || (a.is_constant() && PyTuple_Check(a.obj))) && (b_seq || (b.is_constant() && PyTuple_Check(b.obj)))) {
    std::vector<SymValue> items = a_seq ? a.seq() : unpack(a, static_cast<int>(PyTuple_GET_SIZE(a.obj)));
    std::vector<SymValue> more = b_seq ? b.seq() : unpack(b, static_cast<int>(PyTuple_GET_SIZE(b.obj)));
    items.insert(items.end(), more.begin(), more.end());
    if (items.size() > 4096) throw Unsupported("a sequence of more than 4096 items built in the trace");
    if (a.kind == K::List && sym == "+=") {
      check_not_iterating(a, "+=");
      if (a.source) mutate_visible(a, "+=");
      a.box->items = items;
      return a;
    }
    if (a.kind == K::List) return SymValue::list(std::move(items));
    SymValue t = SymValue::tuple(std::move(items));
    t.torch_size = a.torch_size || b.torch_size;  // torch.Size + tuple and tuple + torch.Size are sizes
    return t;
  }
  if ((sym == "*" || sym == "*=") && (a_seq || b_seq) && (a.is_constant() || b.is_constant())) {
    const SymValue& seq = a_seq ? a : b;
    const SymValue& count = a_seq ? b : a;
    if (!PyLong_Check(count.obj)) throw Unsupported("sequence repetition by " + describe(count));
    // Each item is a value of the trace (and of a rebuilt state: one instruction each).
    constexpr long kMaxItems = 4096;
    if (PyLong_AsLong(count.obj) * static_cast<long>(seq.seq().size()) > kMaxItems)
      throw Unsupported("a sequence of more than " + std::to_string(kMaxItems) + " items built in the trace");
    std::vector<SymValue> items;
    for (long k = 0; k < PyLong_AsLong(count.obj); ++k) items.insert(items.end(), seq.seq().begin(), seq.seq().end());
    if (seq.kind == K::List && sym == "*=") {
      check_not_iterating(seq, "*=");
      if (seq.source) mutate_visible(seq, "*=");
      seq.box->items = items;
      return seq;
    }
    return seq.kind == K::List ? SymValue::list(std::move(items)) : SymValue::tuple(std::move(items));
  }
  if ((sym == "==" || sym == "!=") && !a.is_tensor() && !b.is_tensor() && (a.is_constant() || b.is_constant())) {
    // A container or function made in the trace against a constant (None, say): never equal.
    const SymValue& other = a.is_constant() ? b : a;
    if (other.kind == K::Dict || other.kind == K::Function || other.kind == K::BoundMethod || other.kind == K::Method ||
        other.kind == K::Iterator)
      return constant((sym == "!=") ? Py_True : Py_False);
  }
  if (!a.is_tensor() && !b.is_tensor())
    throw Unsupported("operator " + sym + " on " + describe(a) + " and " + describe(b));
  const char* op_name = operator_name(sym);
  auto fam = op_name ? family_of_name(op_name) : std::nullopt;
  if (!fam) throw Unsupported(std::string("tensor operator ") + sym + " (" + (op_name ? op_name : "?") + ") is not in the op table");
  return call_family(*fam, {a, b}, {}, op_name);
}

namespace {

bool is_module_container(PyObject* o, const char* name) {
  // NB: resolved once per name (a subscript of anything asks), kept for the process, as torch.nn is.
  static auto* types = new std::unordered_map<std::string, PyObject*>();
  auto it = types->find(name);
  if (it == types->end()) it = types->emplace(name, resolve_python_name(std::string("torch.nn.") + name)).first;
  return it->second && PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(it->second));
}

// Whether c[k] would run Python code of k's class: a dict hashes k and compares it with ==
// (an Enum's Python __hash__ hashes its name: pure, and allowed); a sequence asks k's __index__.
bool runs_user_code_as_key(PyObject* c, PyObject* k) {
  PyTypeObject* tp = Py_TYPE(k);
  if (PyDict_Check(c) || PyAnySet_Check(c)) {
    static PyObject* enum_type = resolve_python_name("enum.Enum");  // NB: kept for the process
    const bool is_enum = enum_type && PyObject_TypeCheck(k, reinterpret_cast<PyTypeObject*>(enum_type));
    return python_dunder(tp, "__eq__") || (python_dunder(tp, "__hash__") && !is_enum);
  }
  return !(PyLong_CheckExact(k) || PyBool_Check(k) || PySlice_Check(k) || is_plain_value(k));
}

}  // namespace

// dict[tensor] of a dict the caller passed, keyed by tensors the trace also read from outside
// (an optimizer's `state`, keyed by its parameters): the value under that very tensor object
// (tensors hash by identity), guarded on the key's identity and read through a weak reference
// to it, so that neither the guards nor the transformed code keep the tensor alive; the path
// names the key by its own source. A key a defaultdict lacks would be made by its __missing__
// now (an optimizer's first step): the frame runs as written this time and is traced again at
// a later call, when the program has made it.
SymValue Tracer::tensor_keyed_item(const SymValue& container, const SymValue& index) {
  PyObject* value = PyDict_GetItemWithError(container.obj, index.obj);
  if (!value) {
    if (PyErr_Occurred()) { PyErr_Clear(); throw Unsupported("subscript of " + describe(container) + " raised"); }
    if (Py_TYPE(container.obj) == defaultdict_type()) {
      result_.retry_later = true;
      throw Unsupported("a defaultdict keyed by tensors lacks the key " + source_name(*index.source) + " (its __missing__ would add it now)");
    }
    throw Unsupported("KeyError: " + source_name(*index.source) + " in a dict keyed by tensors");
  }
  PyOwned keep(Py_NewRef(value));
  // The entry holds for this key object only (held weakly by the guard, as by the path).
  add_guard(index.source, GuardKind::IdIs, index.obj);
  PyObject* ref = PyWeakref_NewRef(index.obj, nullptr);
  if (!ref) { PyErr_Clear(); throw Unsupported("a weak reference to " + source_name(*index.source) + " raised"); }
  auto src = std::make_shared<Source>();
  src->kind = Source::Kind::DictItem;
  src->parent = container.source;
  src->name = source_name(*index.source);
  src->object = ref;  // the Source owns it
  return wrap(value, src);
}

SymValue Tracer::subscript(const SymValue& container, const SymValue& index) {
  using K = SymValue::Kind;
  if (container.is_tensor()) {
    auto fam = family_of_name("operator.getitem");
    if (!fam) throw Unsupported("tensor subscripts are not in the op table");
    return record(*fam, {to_call_arg(container), index_arg(index)}, {}, "Tensor.__getitem__");
  }
  if (container.kind == K::Object) {  // its class's Python __getitem__, inlined
    if (!python_dunder(reinterpret_cast<PyTypeObject*>(container.obj), "__getitem__")) throw Unsupported(describe(container) + " is not subscriptable");
    return call(object_attr(container, "__getitem__"), {index}, {});
  }
  if (container.kind == K::Record && is_model_output(container.obj) && index.is_constant()) {
    if (PyUnicode_Check(index.obj)) {
      for (size_t i = 0; i < container.field_names.size(); ++i)
        if (container.field_names[i] == PyUnicode_AsUTF8(index.obj)) return container.items[i];
      throw Unsupported("KeyError in a model output");
    }
    return subscript(SymValue::tuple(model_output_items(container)), index);
  }
  if (container.kind == K::Dict) {
    if (!index.is_constant()) throw Unsupported("dict subscript with " + describe(index));
    for (size_t i = 0; i < container.box->keys.size(); ++i) {
      int eq = equal(container.box->keys[i], index);
      if (eq < 0) { PyErr_Clear(); throw Unsupported("dict key comparison raised"); }
      if (eq) return container.box->items[i];
    }
    PyObject* error = PyObject_CallOneArg(PyExc_KeyError, index.obj);
    if (!error) PyErr_Clear();
    throw Raised(PyExc_KeyError, "KeyError: " + py_repr(index.obj), error);
  }
  if ((container.kind == K::Tuple || container.kind == K::List || container.kind == K::NamedTuple) && index.is_constant()) {
    const auto& seq = container.seq();
    if (PyLong_Check(index.obj)) {
      Py_ssize_t i = PyLong_AsSsize_t(index.obj);
      const Py_ssize_t n = static_cast<Py_ssize_t>(seq.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) throw Unsupported("index out of range");
      return seq[static_cast<size_t>(i)];
    }
    if (PySlice_Check(index.obj)) {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(index.obj, &start, &stop, &step) < 0) { PyErr_Clear(); throw Unsupported("bad slice"); }
      Py_ssize_t len = PySlice_AdjustIndices(static_cast<Py_ssize_t>(seq.size()), &start, &stop, step);
      std::vector<SymValue> items;
      for (Py_ssize_t k = 0; k < len; ++k) items.push_back(seq[static_cast<size_t>(start + k * step)]);
      if (container.kind == K::List) return SymValue::list(std::move(items));
      SymValue t = SymValue::tuple(std::move(items));
      t.torch_size = container.torch_size;  // a torch.Size's slice is one
      return t;
    }
  }
  if (container.is_constant() && index.is_constant()) {
    PyObject* c = container.obj;
    // nn.ModuleList / Sequential by int: the module in _modules (a dict read, guarded).
    if ((is_module_container(c, "ModuleList") || is_module_container(c, "Sequential")) && PyLong_Check(index.obj)) {
      Py_ssize_t n = PyObject_Length(c);
      Py_ssize_t i = PyLong_AsSsize_t(index.obj);
      if (i < 0) i += n;
      if (i < 0 || i >= n) throw Unsupported("module index out of range");
      return load_attr(container, module_key(c, i));
    }
    if (is_module_container(c, "ModuleList") && PySlice_Check(index.obj)) {  // a list of the modules
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(index.obj, &start, &stop, &step) < 0) { PyErr_Clear(); throw Unsupported("bad slice"); }
      const Py_ssize_t len = PySlice_AdjustIndices(PyObject_Length(c), &start, &stop, step);
      std::vector<SymValue> mods;
      for (Py_ssize_t k = 0; k < len; ++k) mods.push_back(load_attr(container, module_key(c, start + k * step)));
      return SymValue::list(std::move(mods));
    }
    if (is_module_container(c, "ModuleDict") && PyUnicode_Check(index.obj)) return load_attr(container, PyUnicode_AsUTF8(index.obj));
    if ((PyDict_CheckExact(c) || PyList_CheckExact(c) || PyTuple_CheckExact(c)) && container.source) {
      // A key's Python __hash__/__eq__ (or an index's __index__) would run for real, and its
      // answer be baked in.
      if (runs_user_code_as_key(c, index.obj)) throw Unsupported("subscript with a " + describe(index));
      PyObject* r = PyObject_GetItem(c, index.obj);
      if (!r) { PyErr_Clear(); throw Unsupported("subscript of " + describe(container) + " raised"); }
      PyOwned owned(r);
      if (PyDict_CheckExact(c) && PyUnicode_Check(index.obj))
        return wrap(r, child_source(container.source, Source::Kind::DictItem, PyUnicode_AsUTF8(index.obj)));
      if (!PyDict_CheckExact(c) && PyLong_Check(index.obj)) {
        // A tuple's length is fixed, so a negative index names one item (self.min_size[-1]).
        long i = PyLong_AsLong(index.obj);
        if (i < 0 && PyTuple_CheckExact(c)) i += static_cast<long>(PyTuple_GET_SIZE(c));
        if (i >= 0) return wrap(r, child_source(container.source, Source::Kind::Item, "", static_cast<int>(i)));
      }
      throw Unsupported("subscript of " + describe(container));
    }
  }
  if (container.is_constant() && container.source && index.is_tensor() && index.obj && index.source &&
      (PyDict_CheckExact(container.obj) || Py_TYPE(container.obj) == defaultdict_type())) {
    return tensor_keyed_item(container, index);
  }
  if (container.is_python_constant() && index.is_python_constant()) {
    // list[int], tuple[int, ...], dict[str, Tensor]: a type annotation (torch.jit.annotate in
    // torch.nn.functional), a types.GenericAlias made from builtin types only.
    if (container.is_constant() && index.is_constant() &&
        (container.obj == reinterpret_cast<PyObject*>(&PyList_Type) || container.obj == reinterpret_cast<PyObject*>(&PyTuple_Type) ||
         container.obj == reinterpret_cast<PyObject*>(&PyDict_Type) || container.obj == reinterpret_cast<PyObject*>(&PyType_Type))) {
      PyObject* r = PyObject_GetItem(container.obj, index.obj);
      if (!r) { PyErr_Clear(); throw Unsupported("subscript of " + describe(container) + " raised"); }
      PyOwned owned(r);
      return constant(r);
    }
    if (container.is_constant() && !foldable_constant(container.obj) && !THPSize_Check(container.obj)) {
      // A user object with a Python __getitem__: inline it.
      PyOwned key(interned_name("__getitem__"));
      PyObject* gi = _PyType_Lookup(Py_TYPE(container.obj), key.p);
      if (gi && PyFunction_Check(gi)) return call(constant(gi), {container, index}, {});
      throw Unsupported("subscript of " + describe(container));
    }
    PyOwned c(materialize(container)), i(materialize(index));
    if (!foldable_constant(c.p) && !THPSize_Check(c.p)) throw Unsupported("subscript of " + describe(container));
    if (runs_user_code_as_key(c.p, i.p)) throw Unsupported("subscript with a " + describe(index));
    PyObject* r = PyObject_GetItem(c.p, i.p);
    if (!r) { PyErr_Clear(); throw Unsupported("subscript of " + describe(container) + " raised"); }
    PyOwned owned(r);
    return constant(r);
  }
  throw Unsupported("subscript of " + describe(container) + " with " + describe(index));
}

// A loop over a module container unrolls over its current submodules: guard their number.
void Tracer::guard_module_count(const SymValue& container) {
  PyObject** dictptr = _PyObject_GetDictPtr(container.obj);
  PyObject* mods = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, "_modules") : nullptr;
  if (!mods || !container.source) return;
  add_guard(child_source(container.source, Source::Kind::Attr, "_modules"), GuardKind::TypeAndLen, mods);
}

// module.children() / named_children(): nn.Module's generators, unrolled over the module's
// _modules (its names guarded in order, None entries skipped, each child once). Each child is
// also guarded as an instance with an alias slot, so that which children are one object (the
// generators skip repeats) holds as traced.
SymValue Tracer::module_children(const SymValue& module, bool named) {
  PyObject** dictptr = _PyObject_GetDictPtr(module.obj);
  PyObject* mods = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, "_modules") : nullptr;
  if (!mods || !PyDict_CheckExact(mods) || !module.source) throw Unsupported("children() of " + describe(module));
  SourcePtr mods_src = child_source(module.source, Source::Kind::Attr, "_modules");
  add_guard(mods_src, GuardKind::DictKeys, mods);
  std::vector<SymValue> items;
  std::vector<PyObject*> seen;
  PyObject *k, *v;
  Py_ssize_t pos = 0;
  while (PyDict_Next(mods, &pos, &k, &v)) {
    if (!PyUnicode_Check(k)) throw Unsupported("children() of a module with a non-str child name");
    SourcePtr src = child_source(mods_src, Source::Kind::DictItem, PyUnicode_AsUTF8(k));
    if (v == Py_None) {
      add_guard(src, GuardKind::IdIs, v);
      continue;
    }
    add_guard(src, GuardKind::Instance, v);
    if (std::find(seen.begin(), seen.end(), v) != seen.end()) continue;
    seen.push_back(v);
    SymValue child = load_attr(module, PyUnicode_AsUTF8(k));
    items.push_back(named ? SymValue::tuple({constant(k), child}) : child);
  }
  return iterator_of(std::move(items));
}

// nn.Module._named_members as eager runs it for parameters()/buffers() and their named forms:
// the modules in named_modules' order (the module, then each child's tree; a module reached twice
// once), each one's `slot` dict in order (its keys guarded; None entries skipped), a tensor
// reached twice once (the trace's alias guards keep which reads are one object). The generator
// becomes an iterator over the members, read through their sources (graph inputs read at call
// time, as `self.weight` is).
SymValue Tracer::module_members(const SymValue& module, const char* slot, bool named, bool recurse,
                                const std::string& prefix) {
  std::vector<SymValue> items;
  std::vector<PyObject*> seen_modules;
  std::vector<codegen::ValueId> seen_tensors;
  std::function<void(const SymValue&, const std::string&)> walk = [&](const SymValue& m, const std::string& path) {
    if (std::find(seen_modules.begin(), seen_modules.end(), m.obj) != seen_modules.end()) return;
    seen_modules.push_back(m.obj);
    PyObject** dictptr = _PyObject_GetDictPtr(m.obj);
    PyObject* members = dictptr && *dictptr ? PyDict_GetItemString(*dictptr, slot) : nullptr;
    if (!members || !PyDict_CheckExact(members) || !m.source) throw Unsupported(std::string(slot) + " of " + describe(m));
    SourcePtr members_src = child_source(m.source, Source::Kind::Attr, slot);
    add_guard(members_src, GuardKind::DictKeys, members);
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(members, &pos, &k, &v)) {
      if (!PyUnicode_Check(k)) throw Unsupported(std::string(slot) + " with a non-str name");
      SourcePtr src = child_source(members_src, Source::Kind::DictItem, PyUnicode_AsUTF8(k));
      if (v == Py_None) {
        add_guard(src, GuardKind::IdIs, v);
        continue;
      }
      SymValue t = wrap(v, src);
      if (!t.is_tensor()) throw Unsupported(std::string(slot) + " entry that is not a tensor");
      if (std::find(seen_tensors.begin(), seen_tensors.end(), t.tensor) != seen_tensors.end()) continue;
      seen_tensors.push_back(t.tensor);
      const std::string name = path.empty() ? PyUnicode_AsUTF8(k) : path + "." + PyUnicode_AsUTF8(k);
      items.push_back(named ? SymValue::tuple({Tracer::constant(PyOwned(PyUnicode_FromString(name.c_str())).p), t}) : t);
    }
    if (!recurse) return;
    SymValue children = module_children(m, true);
    for (const SymValue& c : children.box->items) {
      const std::string child = PyUnicode_AsUTF8(c.items[0].obj);
      walk(c.items[1], path.empty() ? child : path + "." + child);
    }
  };
  walk(module, prefix);
  return iterator_of(std::move(items));
}

SymValue Tracer::make_iterator(const SymValue& v) {
  using K = SymValue::Kind;
  constexpr Py_ssize_t kMaxUnroll = 4096;
  std::vector<SymValue> items;
  switch (v.kind) {
    case K::Iterator: return v;
    case K::Tuple:
    case K::List:
    case K::NamedTuple:
      items = v.seq();
      if (v.kind == K::List) {
        SymValue it = iterator_of(std::move(items));
        live_iterators_.emplace_back(v.box.get(), it.box);
        return it;
      }
      break;
    case K::Dict: {
      SymValue it = iterator_of(v.box->keys);
      live_iterators_.emplace_back(v.box.get(), it.box);
      return it;
    }
    case K::Set: {  // the private set's own order, which is eager's (same operations on it)
      PyOwned list(PySequence_List(v.obj));
      for (Py_ssize_t i = 0; list.p && i < PyList_GET_SIZE(list.p); ++i) items.push_back(constant(PyList_GET_ITEM(list.p, i)));
      SymValue it = iterator_of(std::move(items));
      live_iterators_.emplace_back(v.box.get(), it.box);
      return it;
    }
    case K::Tensor: {
      auto fam = family_of_tensor_attr("unbind");
      if (!fam) throw Unsupported("iterating a tensor needs Tensor.unbind");
      const auto& m = meta(v);
      if (m.dim() == 0) throw Unsupported("iteration over a 0-d tensor");
      if (m.sizes[0] > kMaxUnroll) throw Unsupported("iterating a tensor of " + std::to_string(m.sizes[0]) + " rows");
      items = call_family(*fam, {v}, {}, "Tensor.__iter__").items;
      break;
    }
    case K::Constant: {
      PyObject* o = v.obj;
      if (is_module_container(o, "ModuleList") || is_module_container(o, "Sequential")) {
        const Py_ssize_t n = PyObject_Length(o);
        guard_module_count(v);
        for (Py_ssize_t i = 0; i < n; ++i) items.push_back(load_attr(v, module_key(o, i)));
        break;
      }
      if (is_module_container(o, "ModuleDict")) {
        guard_module_count(v);
        PyOwned keys(PySequence_List(o));
        if (!keys.p) { PyErr_Clear(); throw Unsupported("iterating a ModuleDict"); }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(keys.p); ++i) items.push_back(constant(PyList_GET_ITEM(keys.p, i)));
        break;
      }
      const bool view = PyDictKeys_Check(o) || PyDictValues_Check(o) || PyDictItems_Check(o);
      const bool sequence = PyTuple_Check(o) || PyList_CheckExact(o) || PyRange_Check(o) || PyDict_Check(o) ||
                            PyUnicode_CheckExact(o) || THPSize_Check(o) || view;  // never a live iterator: draining it is for real
      if (!sequence) throw Unsupported("iteration over " + describe(v));
      if (!PyIter_Check(o) && PyObject_Length(o) > kMaxUnroll) throw Unsupported("a loop of more than " + std::to_string(kMaxUnroll) + " iterations");
      PyOwned list(PySequence_List(o));
      if (!list.p) { PyErr_Clear(); throw Unsupported("iteration over " + describe(v) + " raised"); }
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list.p); ++i) {
        PyObject* item = PyList_GET_ITEM(list.p, i);
        SourcePtr src = (v.source && (PyTuple_CheckExact(o) || PyList_CheckExact(o)))
                            ? child_source(v.source, Source::Kind::Item, "", static_cast<int>(i)) : nullptr;
        items.push_back(src ? wrap(item, src) : constant(item));
      }
      PyErr_Clear();
      break;
    }
    case K::Object: {  // its class's Python __iter__, inlined (a generator runs to its end)
      if (!python_dunder(reinterpret_cast<PyTypeObject*>(v.obj), "__iter__")) throw Unsupported("iteration over " + describe(v));
      if (std::optional<std::vector<SymValue>> seq = sequence_items(v)) return iterator_of(std::move(*seq));
      SymValue it = call(object_attr(v, "__iter__"), {}, {});
      if (it.kind != K::Iterator) throw Unsupported("__iter__ of " + describe(v) + " gave " + describe(it));
      return it;
    }
    default:
      throw Unsupported("iteration over " + describe(v));
  }
  SymValue it = iterator_of(std::move(items));
  // Fixed items (values.h): tuples, a tensor's rows, module lists, immutable constants.
  PyObject* o = v.kind == K::Constant ? v.obj : nullptr;
  it.box->fixed = !o || PyTuple_Check(o) || PyRange_Check(o) || PyUnicode_CheckExact(o) || THPSize_Check(o) ||
                  is_module_container(o, "ModuleList") || is_module_container(o, "Sequential");
  return it;
}

std::vector<SymValue> Tracer::unpack(const SymValue& seq, int n) {
  SymValue it = make_iterator(seq);
  std::vector<SymValue> items = remaining(it);
  if (static_cast<int>(items.size()) != n)
    throw Unsupported("unpacking " + std::to_string(items.size()) + " values into " + std::to_string(n));
  return items;
}

bool Tracer::truth(const SymValue& v, const char* what) {
  using K = SymValue::Kind;
  switch (v.kind) {
    case K::Constant:
    case K::Object: {
      PyTypeObject* tp = value_type(v);
      // A Python __bool__ (else a Python __len__) is inlined: it runs in the trace as often as
      // eager runs it, its effects replayed, instead of once for real with its answer baked in.
      PyOwned bool_name(interned_name("__bool__"));
      PyObject* bool_fn = python_dunder(tp, "__bool__");
      PyObject* len_fn = _PyType_Lookup(tp, bool_name.p) ? nullptr : python_dunder(tp, "__len__");
      if (bool_fn || len_fn) {
        SymValue r = call(constant(bool_fn ? bool_fn : len_fn), {v}, {});
        if (!r.is_constant() || !(bool_fn ? PyBool_Check(r.obj) : PyLong_CheckExact(r.obj)))
          throw Unsupported(std::string(what) + " on " + describe(v) + ": its " + (bool_fn ? "__bool__" : "__len__") + " gave " + describe(r));
        return bool_fn ? r.obj == Py_True : PyObject_IsTrue(r.obj) == 1;
      }
      const bool own_truth = (tp->tp_as_number && tp->tp_as_number->nb_bool) ||
                             (tp->tp_as_mapping && tp->tp_as_mapping->mp_length) ||
                             (tp->tp_as_sequence && tp->tp_as_sequence->sq_length);
      if (v.kind == K::Object) {  // made in the trace: true, unless a C __bool__ would decide
        if (own_truth) throw Unsupported(std::string(what) + " on " + describe(v) + " runs a C __bool__");
        return true;
      }
      if (own_truth) pin(v);  // __bool__ or __len__ answers on this very object
      int r = PyObject_IsTrue(v.obj);
      if (r < 0) { PyErr_Clear(); throw Unsupported(std::string(what) + " on " + describe(v) + " raised"); }
      return r == 1;
    }
    case K::Tensor: throw Unsupported(std::string(what) + " depends on a tensor's value");
    case K::Tuple:
    case K::List:
    case K::NamedTuple: return !v.seq().empty();
    case K::Dict: return !v.box->keys.empty();
    case K::Set: return PySet_GET_SIZE(v.obj) > 0;
    case K::Null: throw InternalError("truth value of NULL");
    default: return true;
  }
}

}  // namespace fastdyn::symbolic
