// symbolic/calls.cpp — what the interpreter does with values: attribute reads, calls (ops through
// the op table, Python functions/methods/modules inlined into a new FrameState, pure functions
// folded on constants). Builtins on symbolic values are in builtins.cpp; methods of containers
// made in the trace in containers.cpp; operators, subscripts and iteration in operators.cpp.
#include <ATen/Context.h>
#include <ATen/record_function.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <optional>
#include <cstring>

#include "codegen/shapes/propagate.h"
#include "runtime/errors.h"
#include "symbolic/py_ops.h"
#include "symbolic/calls.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {

using codegen::Family;


// Python builtins that are pure on constant arguments and may be folded at trace time.
static bool is_foldable_builtin(PyObject* fn) {
  static const char* names[] = {"len", "min", "max", "abs", "int", "float", "bool", "tuple",
                                "list", "sum", "round", "divmod", "isinstance", "issubclass", "pow", "range",
                                "str", "slice", "all", "any", "reversed", "sorted", "id", "hash", "set", "frozenset", "type"};
  if (!PyCFunction_Check(fn) && !PyType_Check(fn)) return false;
  for (const char* n : names)
    if (builtin(n) == fn) return true;
  return false;
}

static bool is_lru_cache(PyObject* fn) {
  static PyObject* lru_wrapper = resolve_python_name("functools._lru_cache_wrapper");  // NB: kept for the process
  return lru_wrapper && PyObject_TypeCheck(fn, reinterpret_cast<PyTypeObject*>(lru_wrapper));
}

// A functools.lru_cache over a function its library marks constant for the life of the process
// (torch._dynamo.assume_constant_result's marker; transformers' install and version probes): on
// constant arguments it folds like a pure builtin.
static bool constant_lru_cache(PyObject* fn) {
  if (!is_lru_cache(fn)) return false;
  PyOwned wrapped(PyObject_GetAttrString(fn, "__wrapped__"));
  PyOwned marked(wrapped.p ? PyObject_GetAttrString(wrapped.p, "_dynamo_marked_constant") : nullptr);
  PyErr_Clear();
  return marked.p == Py_True;
}

// Whether `v` holds an nn.Module that came from the frame (wrap() guards those by type only).
static bool holds_type_guarded_module(const SymValue& v) {
  switch (v.kind) {
    case SymValue::Kind::Constant: {
      if (!v.source) return false;
      return PyObject_TypeCheck(v.obj, reinterpret_cast<PyTypeObject*>(module_type()));
    }
    case SymValue::Kind::BoundMethod: return !v.items.empty() && holds_type_guarded_module(v.items[0]);
    case SymValue::Kind::Tuple:
    case SymValue::Kind::List:
    case SymValue::Kind::Slice:
      for (const SymValue& i : v.seq())
        if (holds_type_guarded_module(i)) return true;
      return false;
    default: return false;
  }
}

static bool is_math_function(PyObject* fn) {
  if (!PyCFunction_Check(fn)) return false;
  PyObject* self = PyCFunction_GET_SELF(fn);
  if (!self || !PyModule_Check(self)) return false;
  const char* mod = PyModule_GetName(self);
  if (!mod) { PyErr_Clear(); return false; }
  return std::strcmp(mod, "math") == 0 || std::strcmp(mod, "operator") == 0;
}

// Operator module names of BINARY_OP symbols.
const char* operator_name(const std::string& sym) {
  static const std::pair<const char*, const char*> table[] = {
      {"+", "operator.add"}, {"-", "operator.sub"}, {"*", "operator.mul"},
      {"/", "operator.truediv"}, {"//", "operator.floordiv"}, {"%", "operator.mod"},
      {"**", "operator.pow"}, {"@", "operator.matmul"}, {"&", "operator.and_"},
      {"|", "operator.or_"}, {"^", "operator.xor"}, {"<<", "operator.lshift"},
      {">>", "operator.rshift"}, {"+=", "operator.iadd"}, {"-=", "operator.isub"},
      {"*=", "operator.imul"}, {"/=", "operator.itruediv"}, {"//=", "operator.ifloordiv"},
      {"%=", "operator.imod"}, {"**=", "operator.ipow"}, {"@=", "operator.imatmul"},
      {"&=", "operator.iand"}, {"|=", "operator.ior"}, {"^=", "operator.ixor"},
      {"<<=", "operator.ilshift"}, {">>=", "operator.irshift"}, {"<", "operator.lt"},
      {"<=", "operator.le"}, {"==", "operator.eq"}, {"!=", "operator.ne"}, {">", "operator.gt"},
      {">=", "operator.ge"}};
  for (const auto& [s, n] : table)
    if (sym == s) return n;
  return nullptr;
}

// Folds a Python operator on constants. New reference or nullptr (exception cleared).
PyObject* fold_binary(const std::string& sym, PyObject* a, PyObject* b) {
  using Fn = PyObject* (*)(PyObject*, PyObject*);
  static const std::pair<const char*, Fn> table[] = {
      {"+", PyNumber_Add}, {"-", PyNumber_Subtract}, {"*", PyNumber_Multiply},
      {"/", PyNumber_TrueDivide}, {"//", PyNumber_FloorDivide}, {"%", PyNumber_Remainder},
      {"@", PyNumber_MatrixMultiply}, {"&", PyNumber_And}, {"|", PyNumber_Or},
      {"^", PyNumber_Xor}, {"<<", PyNumber_Lshift}, {">>", PyNumber_Rshift}};
  std::string base = sym;
  if (base.size() >= 2 && base.back() == '=' && base != "==" && base != "!=" && base != "<=" && base != ">=")
    base.pop_back();  // constants are immutable: a += b folds like a + b
  if (base == "**") return PyNumber_Power(a, b, Py_None);
  for (const auto& [s, fn] : table)
    if (base == s) return fn(a, b);
  return nullptr;
}

bool foldable_constant(PyObject* o) {
  return o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) ||
         PyUnicode_CheckExact(o) || PyTuple_Check(o) || THPDtype_Check(o) || THPDevice_Check(o) ||
         PyComplex_CheckExact(o) || PySlice_Check(o) || PyList_CheckExact(o);
}

PyObject* tensor_type() {
  static PyObject* t = resolve_python_name("torch.Tensor");  // NB: kept for the process
  return t;
}


SourcePtr const_source(PyObject* obj, const std::string& label) {
  auto s = std::make_shared<Source>();
  s->kind = Source::Kind::Const;
  s->object = Py_NewRef(obj);
  s->name = label;
  return s;
}

SourcePtr child_source(const SourcePtr& parent, Source::Kind kind, const std::string& name, int index) {
  if (!parent) return nullptr;
  auto s = std::make_shared<Source>();
  s->kind = kind;
  s->name = name;
  s->index = index;
  s->parent = parent;
  return s;
}

PyObject* builtin(const char* name) { return dict_item(PyEval_GetBuiltins(), name); }
static PyObject* builtins_module() { return PyImport_AddModule("builtins"); }  // borrowed

// A C method whose call on constant arguments has no side effect: any method of an immutable
// value, the read-only methods of dicts and lists, and os.environ.get.
static bool is_pure_method(PyObject* fn) {
  if (PyMethod_Check(fn)) {
    static PyObject* environ = resolve_python_name("os.environ");
    PyOwned name(PyObject_GetAttrString(fn, "__name__"));
    PyErr_Clear();
    return PyMethod_GET_SELF(fn) == environ && name.p && PyUnicode_Check(name.p) &&
           std::strcmp(PyUnicode_AsUTF8(name.p), "get") == 0;
  }
  if (!PyCFunction_Check(fn)) return false;
  PyObject* self = PyCFunction_GET_SELF(fn);
  if (!self || PyModule_Check(self)) return false;
  if (PyUnicode_Check(self) || PyBytes_Check(self) || PyLong_Check(self) || PyFloat_Check(self) ||
      PyTuple_Check(self) || PyFrozenSet_Check(self))
    return true;
  if (PyDict_Check(self) || PyList_Check(self) || Py_IS_TYPE(self, &PyDictProxy_Type)) {
    const char* name = reinterpret_cast<PyCFunctionObject*>(fn)->m_ml->ml_name;
    static const char* readers[] = {"get", "keys", "values", "items", "copy", "__contains__", "__getitem__", "index", "count"};
    for (const char* r : readers)
      if (std::strcmp(name, r) == 0) return true;
  }
  return false;
}

// transformers' ModelOutput: a dataclass over OrderedDict whose None fields are left out of
// its dict and tuple views.
bool is_model_output(PyObject* type) {
  if (!PyType_Check(type)) return false;
  PyObject* mro = reinterpret_cast<PyTypeObject*>(type)->tp_mro;
  for (Py_ssize_t i = 0; mro && i < PyTuple_GET_SIZE(mro); ++i) {
    auto* t = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(mro, i));
    if (std::strcmp(t->tp_name, "ModelOutput") == 0) return true;
  }
  return false;
}


bool is_namedtuple_type(PyObject* o) {
  return PyType_Check(o) && PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(o), &PyTuple_Type) &&
         PyObject_HasAttrString(o, "_fields");
}

// A namedtuple class whose __new__ is the one collections.namedtuple generated (also under
// typing.NamedTuple): a function evaluated in a namespace named namedtuple_<typename>.
bool namedtuple_generated_new(PyObject* type) {
  static PyObject* const new_name = PyUnicode_InternFromString("__new__");       // NB: kept for the process
  static PyObject* const prefix = PyUnicode_InternFromString("namedtuple_");     // NB: kept for the process
  static PyObject* const init_name = PyUnicode_InternFromString("__init__");     // NB: kept for the process
  if (!is_namedtuple_type(type)) return false;
  // No __init__ of its own either: calling the class runs only what make_namedtuple folds.
  if (_PyType_Lookup(reinterpret_cast<PyTypeObject*>(type), init_name) != _PyType_Lookup(&PyTuple_Type, init_name)) return false;
  PyObject* fn = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(type), new_name);
  if (fn && Py_IS_TYPE(fn, &PyStaticMethod_Type)) fn = PyStaticMethod_Type.tp_descr_get(fn, nullptr, type);
  else if (fn) Py_INCREF(fn);
  if (!fn) return false;
  PyOwned owned(fn);
  if (!PyFunction_Check(fn)) return false;
  PyObject* name = dict_item(PyFunction_GET_GLOBALS(fn), "__name__");
  return name && PyUnicode_Check(name) && PyUnicode_Tailmatch(name, prefix, 0, PY_SSIZE_T_MAX, -1) == 1;
}

SymValue iterator_of(std::vector<SymValue> items) {
  SymValue it = SymValue::boxed(SymValue::Kind::Iterator);
  it.box->items = std::move(items);
  return it;
}

std::vector<SymValue> remaining(const SymValue& it) {
  // Drained into another iterator (enumerate, zip, reversed, list()): no loop steps this one.
  // NB: a mutation while the derived iterator runs is then not seen (check_not_iterating).
  it.box->exhausted = true;
  return std::vector<SymValue>(it.box->items.begin() + static_cast<long>(it.box->pos), it.box->items.end());
}

// `nn.ReLU()`, `nn.Softmax(dim=-1)` in a frame: a module class of torch.nn's own, made from
// constants, that holds no parameter, buffer or submodule once made. Made for real here, once,
// with the random generator's state put back (an __init__ that initialises weights draws from
// it; such a module is refused anyway), and used as a constant that nothing else can reach; it
// must not outlive the frame (Tracer::run). Anything else stays a call the trace does not follow.
bool Calls::make_stateless_module(Tracer& t, PyObject* cls, const std::vector<SymValue>& args,
                                  const std::vector<std::pair<std::string, SymValue>>& kwargs, SymValue* out) {
  PyOwned module_name(PyObject_GetAttrString(cls, "__module__"));
  if (!module_name.p || !PyUnicode_Check(module_name.p)) {
    PyErr_Clear();
    return false;
  }
  if (std::string(PyUnicode_AsUTF8(module_name.p)).rfind("torch.nn.modules.", 0) != 0) return false;
  for (const SymValue& a : args)
    if (!a.is_python_constant()) return false;
  for (const auto& [k, v] : kwargs)
    if (k == "device" || !v.is_python_constant()) return false;
  PyOwned tuple(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
  for (size_t i = 0; i < args.size(); ++i) PyTuple_SET_ITEM(tuple.p, static_cast<Py_ssize_t>(i), t.materialize(args[i]));
  PyOwned kw(PyDict_New());
  for (const auto& [k, v] : kwargs) {
    PyOwned o(t.materialize(v));
    PyDict_SetItemString(kw.p, k.c_str(), o.p);
  }
  static PyObject* get_state = resolve_python_name("torch.get_rng_state");  // NB: kept for the process
  static PyObject* set_state = resolve_python_name("torch.set_rng_state");  // NB: kept for the process
  PyOwned state(PyObject_CallNoArgs(get_state));
  PyOwned m(state.p ? PyObject_Call(cls, tuple.p, kw.p) : nullptr);
  PyOwned restored(state.p ? PyObject_CallOneArg(set_state, state.p) : nullptr);
  if (!m.p || !restored.p) {
    PyErr_Clear();
    return false;
  }
  for (const char* slot : {"_parameters", "_buffers", "_modules"}) {
    PyOwned d(PyObject_GetAttrString(m.p, slot));
    if (!d.p || !PyDict_Check(d.p) || PyDict_GET_SIZE(d.p) != 0) {
      PyErr_Clear();
      return false;
    }
  }
  *out = Tracer::constant(m.p);
  t.made_modules_.push_back(*out);
  return true;
}

bool Tracer::holds_made_module(const SymValue& v, int depth) const {
  if (depth > 16) return true;  // deeper than any trace builds: assume it may
  if (v.kind == SymValue::Kind::Constant && v.obj)
    for (const SymValue& m : made_modules_)
      if (m.obj == v.obj) return true;
  for (const SymValue& i : v.items)
    if (holds_made_module(i, depth + 1)) return true;
  if (v.box) {
    for (const SymValue& i : v.box->items)
      if (holds_made_module(i, depth + 1)) return true;
    for (const SymValue& k : v.box->keys)
      if (holds_made_module(k, depth + 1)) return true;
    for (const SymValue& c : v.box->closure)
      if (holds_made_module(c, depth + 1)) return true;
  }
  return false;
}

// ModelOutput's tuple view: the fields that are not None.
std::vector<SymValue> model_output_items(const SymValue& r) {
  std::vector<SymValue> out;
  for (const SymValue& v : r.items)
    if (!(v.is_constant() && v.obj == Py_None)) out.push_back(v);
  return out;
}


SymValue Tracer::call_family(Family fam, const std::vector<SymValue>& args,
                             const std::vector<std::pair<std::string, SymValue>>& kwargs, const char* what) {
  std::vector<codegen::CallArg> cargs;
  cargs.reserve(args.size());
  for (const SymValue& a : args) cargs.push_back(to_call_arg(a));
  std::vector<std::pair<std::string, codegen::CallArg>> ckw;
  for (const auto& [k, v] : kwargs) ckw.emplace_back(k, to_call_arg(v));
  return record(fam, cargs, ckw, what);
}

SymValue Tracer::record(Family fam, const std::vector<codegen::CallArg>& args,
                        const std::vector<std::pair<std::string, codegen::CallArg>>& kwargs, const char* what) {
  const size_t nodes_before = result_.graph.nodes.size();
  codegen::CaptureResult r = codegen::record_call(result_.graph, ctx_, fam, args, kwargs);
  if (!r.ok) throw Unsupported(std::string(what) + ": " + r.reason);
  if (!result_.op_in_try && result_.graph.nodes.size() > nodes_before) result_.op_in_try = inside_try_except();
  // An in-place op that makes a tensor require grad (x.mul_(y * w), x needing none): eager's x
  // joins autograd, but the trace's x stays the value it read, whose meta needs no grad, so code
  // after it reading x.requires_grad would take the other branch (difftest seed 6795): the op
  // runs as written.
  if (!result_.graph.nodes.empty()) {
    const codegen::Node& n = result_.graph.nodes.back();
    if (codegen::op_info(n.op).category == codegen::OpCategory::InPlace && !n.args.empty() &&
        n.args[0].kind == codegen::Arg::Kind::Value && !n.outputs.empty() &&
        result_.graph.meta(n.outputs[0]).requires_grad && !result_.graph.meta(n.args[0].value).requires_grad)
      throw Unsupported(std::string(what) + ": it makes a tensor that needs no grad require grad");
  }
  return from_capture(fam, r);
}

SymValue Tracer::call_tensor_method(const SymValue& self, const std::string& name, std::vector<SymValue> args,
                                    std::vector<std::pair<std::string, SymValue>> kwargs) {
  const codegen::TensorMeta& m = meta(self);
  auto int_arg = [&](size_t i) -> int64_t {
    if (i >= args.size() || !args[i].is_constant() || !PyLong_Check(args[i].obj))
      throw Unsupported("Tensor." + name + ": expected an int argument");
    return PyLong_AsLongLong(args[i].obj);
  };
  auto wrap_dim = [&](int64_t d) {
    const int64_t n = std::max<int64_t>(m.dim(), 1);
    if (d < -n || d >= n) throw Unsupported("Tensor." + name + ": dimension out of range");
    return d < 0 ? d + n : d;
  };
  auto int_obj = [&](int64_t v) {
    PyOwned o(PyLong_FromLongLong(v));
    return constant(o.p);
  };
  if (kwargs.empty()) {
    if (name == "size" || name == "stride") {
      const auto& vec = name == "size" ? m.sizes : m.strides;
      if (name == "size" && m.symbolic()) {  // size-derived ints keep their expressions
        if (args.empty()) return symbolic_shape(self);
        const SymValue shape = symbolic_shape(self);
        return shape.items[static_cast<size_t>(wrap_dim(int_arg(0)))];
      }
      if (name == "stride") read_sizes(self);
      if (args.empty()) {
        if (name == "stride") {
          std::vector<SymValue> items;
          for (int64_t s : vec) items.push_back(int_obj(s));
          PyOwned t(materialize(SymValue::tuple(std::move(items))));
          return constant(t.p);
        }
        return tensor_attr(self, "shape");
      }
      return int_obj(vec[static_cast<size_t>(wrap_dim(int_arg(0)))]);
    }
    if ((name == "dim" || name == "ndimension") && args.empty()) return int_obj(m.dim());
    if ((name == "numel" || name == "nelement") && args.empty()) {
      if (m.symbolic()) {  // the product of the sizes, a size-derived int (x.numel() == 0 folds)
        codegen::shapes::SizeExpr n = codegen::shapes::numel_of(m.sym_sizes);
        SymValue out = int_obj(m.numel());
        if (!n.is_constant()) out.size = std::make_shared<const codegen::shapes::SizeExpr>(std::move(n));
        return out;
      }
      return int_obj(read_sizes(self).numel());
    }
    if (name == "element_size" && args.empty()) return int_obj(static_cast<int64_t>(c10::elementSize(m.dtype)));
    if (name == "is_floating_point" && args.empty())
      return constant(c10::isFloatingType(m.dtype) ? Py_True : Py_False);
    if (name == "is_complex" && args.empty()) return constant(c10::isComplexType(m.dtype) ? Py_True : Py_False);
    if (name == "get_device" && args.empty()) return int_obj(m.device.is_cpu() ? -1 : m.device.index());
    if (name == "is_contiguous" && args.empty()) {
      int64_t expected = 1;
      bool contiguous = true;
      for (int64_t d = m.dim() - 1; d >= 0; --d) {
        if (m.sizes[d] == 1) continue;
        if (m.strides[d] != expected) contiguous = false;
        expected *= m.sizes[d];
      }
      if (m.numel() == 0) contiguous = true;
      return constant(contiguous ? Py_True : Py_False);
    }
  }
  static const char* data_dependent[] = {"item", "tolist", "numpy", "__bool__", "__int__", "__float__",
                                         "nonzero", "unique", "masked_select", "data_ptr"};
  for (const char* d : data_dependent)
    if (name == d) throw Unsupported("Tensor." + name + "() depends on tensor data");
  auto fam = family_of_tensor_attr(name);
  if (!fam) throw Unsupported("tensor method '" + name + "' is not in the op table");
  args.insert(args.begin(), self);
  return call_family(*fam, args, kwargs, ("Tensor." + name).c_str());
}

// ---------------------------------------------------------------------------------------------
// Calls

// fn_source: where the trace read fn, if anywhere. A closure guarded by its parts, not its
// identity (conversions.cpp), has its cells read through it: fn.__closure__[i].cell_contents.
// The function a wrapper that only keeps torch.compile's Dynamo out of it runs: one made by
// torch._dynamo.disable (marked _torchdynamo_disable; once Dynamo is loaded it wraps torch.optim's
// _init_group so) or by torch._disable_dynamo (Optimizer.zero_grad). fastdyn traces what it wraps
// (its own rules decide what breaks); any other function is itself.
static PyObject* past_dynamo_disable(PyObject* fn) {
  static PyObject* lazy_disable = [] {  // torch._disable_dynamo's wrapper's code  NB: kept for the process
    PyOwned wrapped(PyObject_CallFunction(resolve_python_name("torch._disable_dynamo"), "O", resolve_python_name("builtins.len")));
    PyObject* code = wrapped.p && PyFunction_Check(wrapped.p) ? Py_NewRef(PyFunction_GET_CODE(wrapped.p)) : nullptr;
    PyErr_Clear();
    return code;
  }();
  for (int depth = 0; depth < 4 && PyFunction_Check(fn); ++depth) {
    PyObject* dict = reinterpret_cast<PyFunctionObject*>(fn)->func_dict;
    if (!dict) return fn;
    PyObject* marked = dict_item(dict, "_torchdynamo_disable");
    PyObject* wrapped = dict_item(dict, "__wrapped__");
    const bool wrapper = (marked == Py_True) || (lazy_disable && PyFunction_GET_CODE(fn) == lazy_disable);
    if (!wrapper || !wrapped || !PyFunction_Check(wrapped)) return fn;
    fn = wrapped;
  }
  return fn;
}

Calls::Target Calls::target_of_function(Tracer& t, PyObject* fn, const SourcePtr& fn_source_in) {
  SourcePtr fn_source = fn_source_in;
  for (PyObject* inner = past_dynamo_disable(fn); inner != fn;) {  // one level at a time, for the path
    PyObject* dict = reinterpret_cast<PyFunctionObject*>(fn)->func_dict;
    fn = dict_item(dict, "__wrapped__");
    if (fn_source) fn_source = child_source(fn_source, Source::Kind::Attr, "__wrapped__");
  }
  auto* f = reinterpret_cast<PyFunctionObject*>(fn);
  Target tg;
  tg.code = reinterpret_cast<PyCodeObject*>(f->func_code);
  tg.globals = f->func_globals;
  if (f->func_builtins != t.frame_.builtins) throw Unsupported("function with other builtins");
  if (f->func_defaults)
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(f->func_defaults); ++i)
      tg.defaults.push_back(Tracer::constant(PyTuple_GET_ITEM(f->func_defaults, i)));
  if (f->func_kwdefaults && PyDict_Check(f->func_kwdefaults)) {
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(f->func_kwdefaults, &pos, &k, &v)) tg.kwdefaults.emplace_back(PyUnicode_AsUTF8(k), Tracer::constant(v));
  }
  if (f->func_closure) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(f->func_closure); ++i) {
      PyObject* cell = PyTuple_GET_ITEM(f->func_closure, i);
      // A cell of the compiled frame's own closure (a continuation's cells, which the frame's
      // nested functions share): the frame's value for it, read through the frame's closure
      // (guarded there, not by this cell's identity).
      if (const SymValue* own = t.root_free_cell(cell)) {
        tg.cells.push_back(*own);
        continue;
      }
      SymValue c = SymValue::boxed(SymValue::Kind::Cell);
      c.obj = Py_NewRef(cell);
      c.source = fn_source ? child_source(child_source(child_source(fn_source, Source::Kind::Attr, "__closure__"),
                                                       Source::Kind::Item, "", static_cast<int>(i)),
                                          Source::Kind::Attr, "cell_contents")
                           : child_source(const_source(cell, "cell"), Source::Kind::Attr, "cell_contents");
      tg.cells.push_back(std::move(c));
    }
  }
  return tg;
}

Calls::Target Calls::target_of_made(Tracer& t, const SymValue& fn) {
  Target tg;
  tg.code = reinterpret_cast<PyCodeObject*>(fn.obj);
  tg.globals = fn.box->globals.obj ? fn.box->globals.obj : t.fr().globals;  // where it was made
  tg.defaults = fn.box->items;
  for (size_t i = 0; i < fn.field_names.size(); ++i) tg.kwdefaults.emplace_back(fn.field_names[i], fn.items[i]);
  tg.cells = fn.box->closure;
  return tg;
}

SymValue Calls::inline_call(Tracer& t, const Target& tg, Args args, Kwargs kwargs) {
  PyCodeObject* co = tg.code;
  const char* fname = PyUnicode_AsUTF8(co->co_qualname);
  if (co->co_flags & (CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE))
    throw Unsupported(std::string("call of coroutine function ") + fname);
  const int argc = co->co_argcount, kwonly = co->co_kwonlyargcount, posonly = co->co_posonlyargcount;
  const int total = argc + kwonly;
  const bool varargs = co->co_flags & CO_VARARGS, varkw = co->co_flags & CO_VARKEYWORDS;
  auto f = std::make_unique<FrameState>();
  f->code = co;
  f->globals = tg.globals;
  f->depth = t.fr().depth + 1;
  // A generator runs to completion at once; its items come back as an iterator (the generator
  // expressions libraries pass to all(), tuple()...).
  f->generator = co->co_flags & CO_GENERATOR;
  f->insts = decode(co);
  f->locals.resize(static_cast<size_t>(co->co_nlocalsplus));
  auto name_of = [&](int i) { return std::string(PyUnicode_AsUTF8(PyTuple_GET_ITEM(co->co_localsplusnames, i))); };
  const size_t npos = std::min(args.size(), static_cast<size_t>(argc));
  for (size_t i = 0; i < npos; ++i) f->locals[i] = std::move(args[i]);
  if (args.size() > static_cast<size_t>(argc)) {
    if (!varargs) throw Unsupported(std::string(fname) + "() takes " + std::to_string(argc) + " positional arguments");
    f->locals[static_cast<size_t>(total)] = SymValue::tuple(Args(args.begin() + argc, args.end()));
  } else if (varargs) {
    f->locals[static_cast<size_t>(total)] = SymValue::tuple({});
  }
  SymValue extra = SymValue::boxed(SymValue::Kind::Dict);
  for (auto& [k, v] : kwargs) {
    int found = -1;
    for (int i = posonly; i < total; ++i)
      if (name_of(i) == k) found = i;
    if (found >= 0) {
      if (f->locals[static_cast<size_t>(found)]) throw Unsupported(std::string(fname) + "() got multiple values for '" + k + "'");
      f->locals[static_cast<size_t>(found)] = std::move(v);
    } else if (varkw) {
      PyOwned key(PyUnicode_FromString(k.c_str()));
      extra.box->keys.push_back(Tracer::constant(key.p));
      extra.box->items.push_back(std::move(v));
    } else {
      throw Unsupported(std::string(fname) + "() got an unexpected keyword argument '" + k + "'");
    }
  }
  if (varkw) f->locals[static_cast<size_t>(total + (varargs ? 1 : 0))] = std::move(extra);
  const int ndef = static_cast<int>(tg.defaults.size());
  for (int i = argc - ndef; i < argc; ++i)
    if (i >= 0 && !f->locals[static_cast<size_t>(i)]) f->locals[static_cast<size_t>(i)] = tg.defaults[static_cast<size_t>(i - (argc - ndef))];
  for (int i = argc; i < total; ++i)
    for (const auto& [k, v] : tg.kwdefaults)
      if (!f->locals[static_cast<size_t>(i)] && k == name_of(i)) f->locals[static_cast<size_t>(i)] = v;
  for (int i = 0; i < total; ++i)
    if (!f->locals[static_cast<size_t>(i)]) throw Unsupported(std::string(fname) + "() missing argument '" + name_of(i) + "'");
  const int nfree = co->co_nfreevars;
  if (static_cast<int>(tg.cells.size()) != nfree) throw Unsupported(std::string(fname) + ": closure size mismatch");
  for (int i = 0; i < nfree; ++i) f->locals[static_cast<size_t>(co->co_nlocalsplus - nfree + i)] = tg.cells[static_cast<size_t>(i)];
  t.frames_.push_back(std::move(f));
  t.run_frame();
  SymValue out = t.fr().generator ? iterator_of(std::move(t.fr().yields)) : std::move(t.fr().return_value);
  t.frames_.pop_back();
  return out;
}

SymValue Calls::call_module(Tracer& t, const SymValue& m, Args args, Kwargs kwargs) {
  PyObject* mod = m.obj;
  PyObject** dictptr = _PyObject_GetDictPtr(mod);
  PyObject* dict = dictptr ? *dictptr : nullptr;
  if (!dict) throw Unsupported("module without __dict__");
  // No backward hooks and no hooks taking keywords, on the instance or global; guarded so that
  // registering one recompiles. The instance's forward pre-hooks and forward hooks are inlined
  // around forward below, as Module._call_impl runs them (each guarded with its dict).
  for (const char* h : {"_backward_hooks", "_backward_pre_hooks", "_forward_pre_hooks_with_kwargs",
                        "_forward_hooks_with_kwargs", "_forward_hooks_always_called"}) {
    PyObject* d = dict_item(dict, h);
    if (!d) continue;
    if (PyObject_Length(d) != 0) { PyErr_Clear(); throw Unsupported(std::string("module with ") + h); }
    if (m.source) t.add_guard(child_source(m.source, Source::Kind::Attr, h), GuardKind::TypeAndLen, d);
  }
  auto hooks = [&](const char* h) -> std::vector<SymValue> {
    PyObject* d = dict_item(dict, h);
    if (!d || (!m.source && PyObject_Length(d) == 0)) return {};
    if (!m.source) throw Unsupported(std::string("module with ") + h + " reached by no path");
    SymValue hs = t.load_attr(m, h);  // the dict, guarded key by key and hook by hook
    if (hs.kind != SymValue::Kind::Dict) throw Unsupported(std::string("module with ") + h + " no guard can follow");
    return hs.box->items;
  };
  static PyObject* module_mod = resolve_python_name("torch.nn.modules.module");
  if (!t.global_module_hooks_guarded_) {  // checked and guarded at the trace's first module call
    for (const char* h : {"_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                          "_global_backward_pre_hooks"}) {
      PyObject* d = module_mod ? PyObject_GetAttrString(module_mod, h) : nullptr;
      if (!d) { PyErr_Clear(); continue; }
      PyOwned owned(d);
      if (PyObject_Length(d) != 0) { PyErr_Clear(); throw Unsupported(std::string("a global module hook (") + h + ")"); }
      t.add_guard(const_source(d, h), GuardKind::TypeAndLen, d);
    }
    t.global_module_hooks_guarded_ = true;
  }
  if (dict_item(dict, "forward")) throw Unsupported("module with an instance-level forward");
  static PyObject* module_call = resolve_python_name("torch.nn.Module.__call__");
  PyOwned call_key(interned_name("__call__"));
  PyObject* type_call = _PyType_Lookup(Py_TYPE(mod), call_key.p);
  PyOwned fwd_key(interned_name(type_call == module_call ? "forward" : "__call__"));
  PyObject* fwd = _PyType_Lookup(Py_TYPE(mod), fwd_key.p);
  if (!fwd || !PyFunction_Check(fwd)) throw Unsupported(std::string(Py_TYPE(mod)->tp_name) + ".forward is not a Python function");
  // The class may be given another forward (or __call__) later.
  t.guard_class_attr(m, "__call__", type_call);
  if (type_call == module_call) t.guard_class_attr(m, "forward", fwd);
  for (const SymValue& hook : hooks("_forward_pre_hooks")) {  // hook(module, args): new args, or None
    SymValue r = t.call(hook, {m, SymValue::tuple(args)}, {});
    if (r.is_constant() && r.obj == Py_None) continue;
    if (r.is_constant() && PyTuple_Check(r.obj)) {
      args.clear();
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(r.obj); ++i) args.push_back(Tracer::constant(PyTuple_GET_ITEM(r.obj, i)));
    } else {
      args = r.kind == SymValue::Kind::Tuple ? r.items : std::vector<SymValue>{r};
    }
  }
  const std::vector<SymValue> forward_hooks = hooks("_forward_hooks");
  Args hook_args = args;
  args.insert(args.begin(), m);
  SymValue result = inline_call(t, target_of_function(t, fwd), std::move(args), std::move(kwargs));
  for (const SymValue& hook : forward_hooks) {  // hook(module, args, result): a new result, or None
    SymValue r = t.call(hook, {m, SymValue::tuple(hook_args), result}, {});
    if (!(r.is_constant() && r.obj == Py_None)) result = std::move(r);
  }
  return result;
}

bool Calls::is_record_type(PyObject* type) {
  static PyObject* const fields_name = interned_name("__dataclass_fields__");
  static PyObject* const init_name = interned_name("__init__");
  if (!PyType_Check(type) || !PyObject_HasAttr(type, fields_name)) return false;
  // Only the dataclass-made __init__ (no user code to run): its code is compiled from "<string>".
  PyOwned init(PyObject_GetAttr(type, init_name));
  PyErr_Clear();
  if (!init.p || !PyFunction_Check(init.p)) return false;
  PyObject* file = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(init.p))->co_filename;
  return PyUnicode_Check(file) && std::strcmp(PyUnicode_AsUTF8(file), "<string>") == 0;
}

// A dataclass instance made in the frame. It is built for real after the graph (the type's
// own __init__/__post_init__ run then, given every field's value); the trace reads its fields.
// A field left to its default_factory gets the factory's result, called in the trace where
// __init__ would call it.
SymValue Calls::make_record(Tracer& t, PyObject* type, Args args, Kwargs kwargs) {
  PyOwned fields(PyObject_GetAttrString(type, "__dataclass_fields__"));
  PyOwned missing(resolve_python_name("dataclasses.MISSING"));
  if (!fields.p || !PyDict_Check(fields.p)) { PyErr_Clear(); throw Unsupported("dataclass fields"); }
  SymValue v;
  v.kind = SymValue::Kind::Record;
  v.obj = Py_NewRef(type);
  v.box = std::make_shared<SymBox>();  // its identity: every copy of v is this one object
  PyObject *k, *f;
  Py_ssize_t pos = 0;
  size_t positional = 0;
  static PyObject* field_kind = resolve_python_name("dataclasses._FIELD");  // NB: kept for the process
  while (PyDict_Next(fields.p, &pos, &k, &f)) {
    // ClassVar pseudo-fields are no parameter of __init__; an InitVar is one, but no field.
    PyOwned kind(PyObject_GetAttrString(f, "_field_type"));
    PyErr_Clear();
    if (kind.p != field_kind) {
      static PyObject* classvar_kind = resolve_python_name("dataclasses._FIELD_CLASSVAR");  // NB: kept
      if (kind.p == classvar_kind) continue;
      throw Unsupported("a dataclass with an InitVar");
    }
    PyOwned init(PyObject_GetAttrString(f, "init"));
    if (init.p != Py_True) { PyErr_Clear(); throw Unsupported("a dataclass field with init=False"); }
    const std::string name = PyUnicode_AsUTF8(k);
    std::optional<SymValue> value;
    if (positional < args.size()) value = args[positional++];
    for (auto& [kn, kv] : kwargs)
      if (kn == name) value = kv;
    if (!value) {
      PyOwned def(PyObject_GetAttrString(f, "default"));
      PyOwned factory(PyObject_GetAttrString(f, "default_factory"));
      if (!def.p || !factory.p) { PyErr_Clear(); throw Unsupported("dataclass field '" + name + "': reading its default raised"); }
      if (def.p != missing.p) value = Tracer::constant(def.p);
      else if (factory.p != missing.p) value = t.call(Tracer::constant(factory.p), {}, {});
      else throw Unsupported("dataclass field '" + name + "' without a value");
    }
    v.field_names.push_back(name);
    v.items.push_back(std::move(*value));
  }
  if (positional < args.size()) throw Unsupported("too many arguments for a dataclass");
  for (auto& [kn, kv] : kwargs)
    if (std::find(v.field_names.begin(), v.field_names.end(), kn) == v.field_names.end())
      throw Unsupported("unexpected dataclass field '" + kn + "'");
  return v;
}

SymValue Calls::make_namedtuple(PyObject* type, Args args, Kwargs kwargs) {
  PyOwned fields(PyObject_GetAttrString(type, "_fields"));
  if (!fields.p || !PyTuple_Check(fields.p)) { PyErr_Clear(); throw Unsupported("namedtuple without _fields"); }
  const Py_ssize_t n = PyTuple_GET_SIZE(fields.p);
  SymValue v;
  v.kind = SymValue::Kind::NamedTuple;
  v.obj = Py_NewRef(type);
  std::vector<std::optional<SymValue>> slots(static_cast<size_t>(n));
  if (static_cast<Py_ssize_t>(args.size()) > n) throw Unsupported("too many namedtuple fields");
  for (size_t i = 0; i < args.size(); ++i) slots[i] = args[i];
  for (Py_ssize_t i = 0; i < n; ++i) v.field_names.push_back(PyUnicode_AsUTF8(PyTuple_GET_ITEM(fields.p, i)));
  for (auto& [k, val] : kwargs) {
    auto it = std::find(v.field_names.begin(), v.field_names.end(), k);
    if (it == v.field_names.end()) throw Unsupported("namedtuple has no field '" + k + "'");
    slots[static_cast<size_t>(it - v.field_names.begin())] = val;
  }
  PyOwned defaults(PyObject_GetAttrString(type, "_field_defaults"));
  PyErr_Clear();
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!slots[static_cast<size_t>(i)] && defaults.p && PyDict_Check(defaults.p))
      if (PyObject* d = PyDict_GetItemString(defaults.p, v.field_names[static_cast<size_t>(i)].c_str()))
        slots[static_cast<size_t>(i)] = Tracer::constant(d);
    if (!slots[static_cast<size_t>(i)]) throw Unsupported("namedtuple field '" + v.field_names[static_cast<size_t>(i)] + "' missing");
    v.items.push_back(*slots[static_cast<size_t>(i)]);
  }
  return v;
}

SymValue Tracer::call(const SymValue& callable, std::vector<SymValue> args,
                      std::vector<std::pair<std::string, SymValue>> kwargs) {
  using K = SymValue::Kind;
  switch (callable.kind) {
    case K::Method:
      return call_tensor_method(callable.items[0], callable.name, std::move(args), std::move(kwargs));
    case K::BoundMethod:
      if (callable.name == "__fd_null_exit__") return constant(Py_None);
      if (callable.name == "__fd_object_init__") {  // object.__init__ through super(): nothing
        if (!args.empty() || !kwargs.empty()) throw Unsupported("object.__init__() takes no arguments");
        return constant(Py_None);
      }
      if (callable.name == "__fd_autocast_exit__" || callable.name == "__fd_real_autocast_exit__") {  // the state from before the block
        if (autocast_outside_.empty()) throw Unsupported("torch.autocast's __exit__ outside its block");
        ctx_.autocast = autocast_outside_.back();
        autocast_outside_.pop_back();
        if (callable.name == "__fd_real_autocast_exit__") {  // entered for real: exited for real, after the graph
          PyOwned none3(PyTuple_Pack(3, Py_None, Py_None, Py_None));
          replay_call(callable.items.at(0), "__exit__", none3.p);
        }
        return constant(Py_False);
      }
      if (callable.name == "__fd_grad_exit__") {
        set_grad_mode(callable.items.at(1).obj == Py_True);
        return constant(Py_None);
      }
      if (!callable.obj) return container_method(callable.items[0], callable.name, std::move(args), std::move(kwargs));
      if (callable.items[0].is_constant()) {
        static PyObject* environ = resolve_python_name("os.environ");
        if (callable.items[0].obj == environ && (callable.name == "get" || callable.name == "__contains__") &&
            kwargs.empty()) {  // read the environment at trace time (its values are not guarded)
          PyOwned bound(materialize(callable));
          PyOwned tuple(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
          for (size_t i = 0; i < args.size(); ++i) {
            PyObject* o = args[i].is_python_constant() ? materialize(args[i]) : nullptr;
            if (!o) throw Unsupported("os.environ." + callable.name + " with a non-constant argument");
            PyTuple_SET_ITEM(tuple.p, static_cast<Py_ssize_t>(i), o);
          }
          PyOwned r(PyObject_Call(bound.p, tuple.p, nullptr));
          if (!r.p) { PyErr_Clear(); throw Unsupported("os.environ." + callable.name + " raised"); }
          return constant(r.p);
        }
      }
      if (args.empty() && kwargs.empty() && callable.items[0].is_constant()) {
        static PyObject* children = resolve_python_name("torch.nn.Module.children");              // NB: kept
        static PyObject* named_children = resolve_python_name("torch.nn.Module.named_children");  // NB: kept
        if (callable.obj == children || callable.obj == named_children)
          return module_children(callable.items[0], callable.obj == named_children);
      }
      if (callable.items[0].is_constant()) {
        // parameters(recurse=True), buffers(recurse=True), named_parameters(prefix='',
        // recurse=True, remove_duplicate=True), named_buffers(the same): see module_members.
        static PyObject* const member_fns[] = {resolve_python_name("torch.nn.Module.parameters"),
                                               resolve_python_name("torch.nn.Module.buffers"),
                                               resolve_python_name("torch.nn.Module.named_parameters"),
                                               resolve_python_name("torch.nn.Module.named_buffers")};  // NB: kept
        const auto* which = std::find(std::begin(member_fns), std::end(member_fns), callable.obj);
        if (callable.obj && which != std::end(member_fns)) {
          const bool named = which - std::begin(member_fns) >= 2;
          const char* slot = (which - std::begin(member_fns)) % 2 == 0 ? "_parameters" : "_buffers";
          std::vector<std::string> params = named ? std::vector<std::string>{"prefix", "recurse", "remove_duplicate"}
                                                  : std::vector<std::string>{"recurse"};
          std::string prefix;
          bool recurse = true, remove_duplicate = true, ok = args.size() <= params.size();
          auto take = [&](const std::string& name, const SymValue& v) {
            if (!v.is_python_constant()) { ok = false; return; }
            if (name == "prefix" && PyUnicode_Check(v.obj)) prefix = PyUnicode_AsUTF8(v.obj);
            else if (name == "recurse" && PyBool_Check(v.obj)) recurse = v.obj == Py_True;
            else if (name == "remove_duplicate" && PyBool_Check(v.obj)) remove_duplicate = v.obj == Py_True;
            else ok = false;
          };
          for (size_t i = 0; ok && i < args.size(); ++i) take(params[i], args[i]);
          for (const auto& [name, v] : kwargs)
            if (ok) take(name, v);
          if (ok && remove_duplicate) return module_members(callable.items[0], slot, named, recurse, prefix);
        }
      }
      args.insert(args.begin(), callable.items[0]);
      return Calls::inline_call(*this, Calls::target_of_function(*this, callable.obj), std::move(args), std::move(kwargs));
    case K::Function:
      return Calls::inline_call(*this, Calls::target_of_made(*this, callable), std::move(args), std::move(kwargs));
    case K::List:    // an instance of a list subclass with a __call__ (LogitsProcessorList)
    case K::Object: {  // an object of the trace whose class has a __call__ (a logits processor)
      // Looked up on the class, as a call does (an attribute of the object's own is not asked).
      SymValue method;
      bool own = false;
      if (callable.kind == K::Object)
        for (const SymValue& k : callable.box->keys) own = own || PyUnicode_CompareWithASCIIString(k.obj, "__call__") == 0;
      if (callable.obj && !own && python_dunder(reinterpret_cast<PyTypeObject*>(callable.obj), "__call__") &&
          (callable.kind == K::List ? list_subclass_member(callable, "__call__", &method) : object_lookup(callable, "__call__", &method)))
        return call(method, std::move(args), std::move(kwargs));
      throw Unsupported("call of " + describe(callable));
    }
    case K::Constant:
      break;
    default:
      throw Unsupported("call of " + describe(callable));
  }
  {
    // Functions that look at the calling frame itself: in a transformed frame they would see
    // its generated locals (___graph_out) and code, so the frame runs as written.
    static PyObject* const frame_readers[] = {builtin("locals"), builtin("vars"), builtin("dir"), builtin("exec"), builtin("eval"),
                                              resolve_python_name("sys._getframe"), resolve_python_name("inspect.currentframe")};
    const bool no_args_needed = callable.obj == builtin("vars") || callable.obj == builtin("dir");
    if (std::find(std::begin(frame_readers), std::end(frame_readers), callable.obj) != std::end(frame_readers) &&
        (!no_args_needed || args.empty()))
      throw NoBreak(py_repr(callable.obj) + " reads the calling frame (the frame runs as written)");
  }
  PyObject* fn = callable.obj;
  // A Python builtin that families.def also names (builtins.abs) is the tensor op only for a
  // tensor: on Python values it is the builtin (folded below like the others).
  auto python_values_only = [&] {
    for (const SymValue& a : args)
      if (a.kind != SymValue::Kind::Constant) return false;
    for (const auto& kv : kwargs)
      if (kv.second.kind != SymValue::Kind::Constant) return false;
    return true;
  };
  const bool builtin_on_values = PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) == builtins_module() && python_values_only();
  if (auto fam = family_of_object(fn); fam && !builtin_on_values) return call_family(*fam, args, kwargs, py_repr(fn).c_str());
  if (SymValue out; Calls::foreach_call(*this, fn, args, kwargs, out)) return out;
  if (SymValue out; Calls::fused_optimizer_call(*this, fn, args, kwargs, out)) return out;
  if (SymValue out; Calls::deep_copy(*this, fn, args, kwargs, out)) return out;
  if (SymValue out; kwargs.empty() && object_slot_call(fn, args, &out)) return out;
  // Tracing and compiling probes. Like Dynamo, fastdyn answers "compiling" while it traces, so
  // libraries take their compile-friendly paths (transformers builds attention masks without
  // reading their values); jit tracing/scripting and export are not happening.
  static const std::pair<const char*, bool> probe_names[] = {
      {"torch.jit.is_scripting", false}, {"torch.jit.is_tracing", false},
      {"torch.compiler.is_exporting", false}, {"torch.compiler.is_compiling", true},
      {"torch.compiler.is_dynamo_compiling", true}, {"torch._dynamo.is_compiling", true},
      {"torch._utils.is_compiling", true}, {"torch._dynamo.external_utils.is_compiling", true}};
  static PyObject* probes[std::size(probe_names)] = {};
  if (args.empty() && (PyFunction_Check(fn) || PyCFunction_Check(fn)))
    for (size_t i = 0; i < std::size(probe_names); ++i) {
      if (!probes[i]) probes[i] = resolve_loaded_python_name(probe_names[i].first);  // NB: kept for the process
      if (probes[i] == fn) return constant(probe_names[i].second ? Py_True : Py_False);
    }
  // The depth of the TorchDispatchMode stack: 0 wherever compiled code runs (the hook runs frames
  // as written while a mode is active, and the guards check none is: runtime/guards.h).
  static PyObject* dispatch_depth = resolve_python_name("torch._C._len_torch_dispatch_stack");  // NB: kept
  if (fn == dispatch_depth && args.empty() && kwargs.empty()) {
    PyOwned zero(PyLong_FromLong(0));
    return constant(zero.p);
  }
  SymValue made;
  if (Calls::tensor_from_data(*this, fn, args, kwargs, made)) return made;
  // What a C function reports that stays fixed while the entry holds: the name of the
  // privateuse1 backend (torch.optim's device probes read it), the default dtype (in every
  // entry's guards: runtime/guards.h). Folded.
  static PyObject* process_constants[] = {resolve_python_name("torch._C._get_privateuse1_backend_name"),
                                          resolve_python_name("torch.get_default_dtype")};  // NB: kept
  if (args.empty() && kwargs.empty() && std::find(std::begin(process_constants), std::end(process_constants), fn) != std::end(process_constants)) {
    PyOwned r(PyObject_CallNoArgs(fn));
    if (!r.p) { PyErr_Clear(); throw Unsupported("call to " + py_repr(fn) + " raised"); }
    return constant(r.p);
  }
  // torch.autograd.profiler.record_function(name) with no RecordFunction observer installed (no
  // profiler running) records nothing: the trace enters it as a null context (the optimizer
  // step's and zero_grad's block), and the entry is guarded on no observer being installed.
  static PyObject* record_function = resolve_python_name("torch.autograd.profiler.record_function");  // NB: kept
  if (record_function && fn == record_function && !at::hasCallbacks()) {
    bool constants = true;
    for (const SymValue& a : args) constants = constants && a.is_python_constant();
    for (const auto& kv : kwargs) constants = constants && kv.second.is_python_constant();
    if (constants) {
      static PyObject* nullcontext = resolve_python_name("contextlib.nullcontext");  // NB: kept
      PyOwned obj(PyObject_CallNoArgs(nullcontext));
      if (!obj.p) { PyErr_Clear(); throw Unsupported("making contextlib.nullcontext raised"); }
      result_.no_record_function_observers = true;
      return constant(obj.p);
    }
  }
  // Context managers that are plain objects until a `with` enters them: made for real.
  static PyObject* plain_managers[] = {resolve_python_name("torch.autograd.grad_mode.no_grad"),
                                       resolve_python_name("torch.autograd.grad_mode.enable_grad"),
                                       resolve_python_name("contextlib.nullcontext")};
  if (std::find(std::begin(plain_managers), std::end(plain_managers), fn) != std::end(plain_managers) &&
      kwargs.empty() && args.size() <= 1 && (args.empty() || args[0].is_python_constant())) {
    PyOwned arg(args.empty() ? nullptr : materialize(args[0]));
    PyOwned obj(arg.p ? PyObject_CallOneArg(fn, arg.p) : PyObject_CallNoArgs(fn));
    if (!obj.p) { PyErr_Clear(); throw Unsupported("creating " + py_repr(fn) + " raised"); }
    return constant(obj.p);
  }
  // torch.set_grad_enabled(mode) sets the mode as it is made (a `with` on it then does nothing
  // more, and its __exit__ restores the mode it saved). In the trace: the mode changes here, and
  // the object is made without its __init__ (which would set the real mode now), holding the
  // mode before (`prev`) and `mode` as __init__ would.
  static PyObject* set_grad_type = resolve_python_name("torch.autograd.grad_mode.set_grad_enabled");  // NB: kept
  if (fn == set_grad_type && kwargs.empty() && args.size() == 1 && args[0].is_constant() && PyBool_Check(args[0].obj)) {
    PyTypeObject* tp = reinterpret_cast<PyTypeObject*>(fn);
    PyOwned empty(PyTuple_New(0));
    PyOwned obj(tp->tp_new(tp, empty.p, nullptr));
    if (!obj.p || PyObject_SetAttrString(obj.p, "prev", ctx_.grad_enabled ? Py_True : Py_False) < 0 ||
        PyObject_SetAttrString(obj.p, "mode", args[0].obj) < 0) {
      PyErr_Clear();
      throw Unsupported("making torch.set_grad_enabled raised");
    }
    set_grad_mode(args[0].obj == Py_True);
    return constant(obj.p);
  }
  // torch.autocast(device_type, dtype=..., enabled=..., cache_enabled=...) of constants, made for
  // real: a plain object until a `with` enters it. Without a dtype it reads the device type's
  // autocast dtype, which the entry's guards check (runtime/autocast_state.h).
  static PyObject* autocast_type = resolve_python_name("torch.amp.autocast_mode.autocast");
  if (autocast_type && fn == autocast_type) {
    PyOwned tuple(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i].is_python_constant()) throw Unsupported("torch.autocast with a non-constant argument");
      PyTuple_SET_ITEM(tuple.p, static_cast<Py_ssize_t>(i), materialize(args[i]));
    }
    PyOwned kw(PyDict_New());
    for (const auto& [name, v] : kwargs) {
      if (!v.is_python_constant()) throw Unsupported("torch.autocast with a non-constant argument");
      PyOwned o(materialize(v));
      PyDict_SetItemString(kw.p, name.c_str(), o.p);
    }
    PyOwned obj(PyObject_Call(fn, tuple.p, kw.p));
    if (!obj.p) { PyErr_Clear(); throw Unsupported("creating torch.autocast raised"); }
    return constant(obj.p);
  }
  if (PyObject_TypeCheck(fn, reinterpret_cast<PyTypeObject*>(module_type()))) return Calls::call_module(*this, callable, std::move(args), std::move(kwargs));
  PyErr_Clear();
  // An instance of a Python class with a Python __call__ (torchvision's LevelMapper): the method
  // is inlined on it, guarded on the class as a method read is.
  if (!PyType_Check(fn) && !PyFunction_Check(fn) && !PyCFunction_Check(fn) && !PyMethod_Check(fn)) {
    static PyObject* call_name = PyUnicode_InternFromString("__call__");  // NB: kept for the process
    PyObject* call_fn = _PyType_Lookup(Py_TYPE(fn), call_name);  // borrowed
    if (call_fn && PyFunction_Check(call_fn) && (Py_TYPE(fn)->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
      guard_class_attr(callable, "__call__", call_fn);
      args.insert(args.begin(), callable);
      return call(constant(call_fn), std::move(args), std::move(kwargs));
    }
  }
  static PyObject* signature = resolve_python_name("inspect.signature");  // NB: kept for the process
  // inspect.signature(obj.method) reads the method's function only (a bound method's signature
  // is its function's without the first parameter): the object itself, which may be guarded by
  // its type or made in the trace (a logits processor), is not fixed by it.
  if (fn == signature && args.size() == 1 && kwargs.empty() && args[0].kind == SymValue::Kind::BoundMethod && args[0].obj &&
      PyFunction_Check(args[0].obj)) {
    static PyObject* placeholder = PyObject_CallNoArgs(reinterpret_cast<PyObject*>(&PyBaseObject_Type));  // NB: kept
    PyOwned method(PyMethod_New(args[0].obj, placeholder));
    PyOwned sig(method.p ? PyObject_CallOneArg(signature, method.p) : nullptr);
    if (!sig.p) { PyErr_Clear(); throw Unsupported("inspect.signature of " + describe(args[0]) + " raised"); }
    return constant(sig.p);
  }
  if (PyFunction_Check(fn)) {
    // Pure library functions called on constants are answered for real rather than inlined.
    // NB: is_python_constant() reads size-derived ints (pins them): asked only of signature's.
    bool consts = fn == signature;
    for (const SymValue& a : args) consts = consts && a.is_python_constant();
    for (const auto& kv : kwargs) consts = consts && kv.second.is_python_constant();
    if (!consts)
      return Calls::inline_call(*this, Calls::target_of_function(*this, fn, callable.source), std::move(args), std::move(kwargs));
  }
  if (PyMethod_Check(fn) && PyFunction_Check(PyMethod_GET_FUNCTION(fn))) {
    args.insert(args.begin(), constant(PyMethod_GET_SELF(fn)));
    pin(args[0]);  // read without its source: this object itself
    return Calls::inline_call(*this, Calls::target_of_function(*this, PyMethod_GET_FUNCTION(fn)), std::move(args), std::move(kwargs));
  }
  static PyObject* partial_type = resolve_python_name("functools.partial");
  if (partial_type && PyObject_TypeCheck(fn, reinterpret_cast<PyTypeObject*>(partial_type))) {
    PyOwned func(PyObject_GetAttrString(fn, "func")), pargs(PyObject_GetAttrString(fn, "args")),
        pkw(PyObject_GetAttrString(fn, "keywords"));
    if (!func.p || !pargs.p || !pkw.p) { PyErr_Clear(); throw Unsupported("functools.partial"); }
    std::vector<SymValue> all;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(pargs.p); ++i) all.push_back(constant(PyTuple_GET_ITEM(pargs.p, i)));
    for (SymValue& a : args) all.push_back(std::move(a));
    std::vector<std::pair<std::string, SymValue>> kw;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(pkw.p, &pos, &k, &v)) {
      bool overridden = false;
      for (const auto& kv : kwargs) overridden = overridden || kv.first == PyUnicode_AsUTF8(k);
      if (!overridden) kw.emplace_back(PyUnicode_AsUTF8(k), constant(v));
    }
    for (auto& kv : kwargs) kw.push_back(std::move(kv));
    return call(constant(func.p), std::move(all), std::move(kw));
  }
  // A namedtuple class made by namedtuple (typing.NamedTuple included): its fields as given. One
  // with a __new__ of its own is user code (it may change them): not folded here.
  if (namedtuple_generated_new(fn)) return Calls::make_namedtuple(fn, std::move(args), std::move(kwargs));
  // tuple.__new__(cls, items): what the __new__ that namedtuple generates (and a typing.NamedTuple
  // returned by a compiled frame, rebuilt by calling its class) runs.
  static PyObject* tuple_new = resolve_python_name("builtins.tuple.__new__");  // NB: kept for the process
  if (fn == tuple_new && args.size() == 2 && kwargs.empty() && args[0].is_constant() && is_namedtuple_type(args[0].obj))
    return Calls::make_namedtuple(args[0].obj, remaining(make_iterator(args[1])), {});
  // A dataclass whose instances are plain objects is one (its generated __init__ inlined, so that
  // default factories run and fields can be assigned); a frozen one, or one with a base of its
  // own layout (transformers' ModelOutput, an OrderedDict), is a record of its fields.
  if (PyType_Check(fn) && PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(fn), reinterpret_cast<PyTypeObject*>(module_type())))
    if (SymValue made; Calls::make_stateless_module(*this, fn, args, kwargs, &made)) return made;
  if (plain_class(fn)) return new_object(fn, std::move(args), std::move(kwargs));
  if (plain_list_subclass(fn)) return new_list_subclass(fn, std::move(args), std::move(kwargs));
  if (Calls::is_record_type(fn)) return Calls::make_record(*this, fn, std::move(args), std::move(kwargs));
  // A builtin exception of constants, made for real (its constructor runs no Python), for a
  // raise (interpreter.cpp); marked so that it never outlives the trace as a shared constant.
  if (PyExceptionClass_Check(fn) && !(reinterpret_cast<PyTypeObject*>(fn)->tp_flags & Py_TPFLAGS_HEAPTYPE) && kwargs.empty()) {
    PyOwned tuple(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i].is_python_constant()) throw Unsupported(py_repr(fn) + " of " + describe(args[i]));
      PyTuple_SET_ITEM(tuple.p, static_cast<Py_ssize_t>(i), materialize(args[i]));
    }
    PyOwned e(PyObject_Call(fn, tuple.p, nullptr));
    if (!e.p) { PyErr_Clear(); throw Unsupported("creating " + py_repr(fn) + " raised"); }
    SymValue v = constant(e.p);
    v.name = kTraceException;
    return v;
  }
  SymValue out;
  if (Calls::builtin_call(*this, fn, args, kwargs, out)) return out;
  if (Calls::torch_function_probe(fn, args, kwargs, out)) return out;
  // Reductions over an iterator made in the trace (a generator expression, say).
  static const char* over_iterables[] = {"all", "any", "sum", "min", "max", "sorted", "tuple", "list", "set", "frozenset"};
  for (const char* name : over_iterables)
    if (fn == builtin(name) && args.size() == 1 && args[0].kind == SymValue::Kind::Iterator)
      args[0] = SymValue::tuple(remaining(args[0]));
  // Pure functions on constants: builtins, math, operator, torch.finfo/iinfo, methods of
  // immutable values (str.startswith...) and read-only methods of containers (dict.get...).
  // A builtin reads a set of the trace through a copy of it (sorted(s), len(s), list(s)...).
  for (SymValue& a : args)
    if (a.kind == SymValue::Kind::Set && (is_foldable_builtin(fn) || is_math_function(fn))) {
      PyOwned copy(set_operand(a));
      a = constant(copy.p);
    }
  bool all_const = true;
  for (const SymValue& a : args) all_const = all_const && a.is_python_constant();
  for (const auto& kv : kwargs) all_const = all_const && kv.second.is_python_constant();
  static PyObject* finfo = resolve_python_name("torch.finfo");
  static PyObject* iinfo = resolve_python_name("torch.iinfo");
  if (all_const && (is_foldable_builtin(fn) || is_math_function(fn) || fn == finfo || fn == iinfo ||
                    fn == signature || fn == partial_type || is_pure_method(fn) || constant_lru_cache(fn))) {
    // An nn.Module read from the frame is guarded by its type, so one entry serves every
    // instance of a class: a folded call must not depend on which instance it is. isinstance
    // and type read only its type, inspect.signature(self.forward) its class's function;
    // anything else (partial(forward, self) capturing it, id, hash, len, str of it) would bake
    // this instance into the entry. HF's gradient checkpointing made partial(forward, self) per
    // layer: the second layer ran the first layer's forward.
    static PyObject* const type_only[] = {builtin("isinstance"), builtin("type"), signature};
    if (std::find(std::begin(type_only), std::end(type_only), fn) == std::end(type_only)) {
      bool instance_dependent = false;
      for (const SymValue& a : args) instance_dependent = instance_dependent || holds_type_guarded_module(a);
      for (const auto& kv : kwargs) instance_dependent = instance_dependent || holds_type_guarded_module(kv.second);
      if (instance_dependent)
        throw Unsupported("call of " + py_repr(fn) + " on an nn.Module instance (folding it would fix the instance)");
    }
    // Anything else runs the arguments' own methods (divmod, hash, str, sorted, math.floor... call
    // __divmod__, __hash__, __lt__, __floor__): on an object of a Python class that is user code,
    // which would run here once for real and never again in the compiled code.
    static PyObject* const runs_no_method[] = {builtin("isinstance"), builtin("type"), builtin("id"), signature, partial_type};
    const bool check_values = std::find(std::begin(runs_no_method), std::end(runs_no_method), fn) == std::end(runs_no_method);
    auto checked = [&](PyObject* o) {
      // An object the trace stored attributes to: those stores are replayed after the graph, so
      // its real state now is not what the call would see.
      if (check_values && written_attrs_of(o)) {
        Py_DECREF(o);
        throw Unsupported("call of " + py_repr(fn) + " on an object with attribute stores pending");
      }
      if (check_values && !holds_only_builtin_values(o, 0)) {
        Py_DECREF(o);
        throw Unsupported("call of " + py_repr(fn) + " on an object of a Python class (it would run the object's methods)");
      }
      return o;
    };
    // id() names an object: only one that exists (a constant, pinned by materialize) has one. A
    // list or tuple of the trace materialises as a temporary, whose address the next one reuses
    // (id(a) == id(list(a)) came out True).
    if (fn == builtin("id") && (args.size() != 1 || !args[0].is_constant()))
      throw Unsupported("id() of " + (args.empty() ? std::string("nothing") : describe(args[0])) + ", a value made in the trace");
    PyOwned tuple(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
    for (size_t i = 0; i < args.size(); ++i) {
      PyObject* o = materialize(args[i]);
      if (!o) throw Unsupported("argument of " + py_repr(fn));
      PyTuple_SET_ITEM(tuple.p, static_cast<Py_ssize_t>(i), checked(o));
    }
    PyOwned kw(kwargs.empty() ? nullptr : PyDict_New());
    for (const auto& [k, v] : kwargs) {
      PyOwned o(checked(materialize(v)));
      PyDict_SetItemString(kw.p, k.c_str(), o.p);
    }
    PyObject* r = PyObject_Call(fn, tuple.p, kw.p);
    if (!r) {
      PyErr_Clear();
      throw Unsupported("call of " + py_repr(fn) + " raised on constant arguments");
    }
    PyOwned owned(r);
    if (PyIter_Check(r)) throw Unsupported("iterator from " + py_repr(fn));
    // A new list (sorted, list(...)) is the frame's own, mutable: a list value of the trace, not
    // a constant that every later call would share (and find mutated); a new set cannot be one.
    // (Fresh: only this call's result refers to it; dict.get of a registry returns one it holds.)
    const bool fresh = Py_REFCNT(r) == 1;
    if (fresh && PyList_CheckExact(r)) {
      std::vector<SymValue> items;
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(r); ++i) items.push_back(constant(PyList_GET_ITEM(r, i)));
      return SymValue::list(std::move(items));
    }
    if (fresh && PySet_CheckExact(r) && compares_in_c(r)) return set_value(r);  // set(...): the frame's own
    if (fresh && (PySet_CheckExact(r) || PyDict_CheckExact(r) || PyByteArray_CheckExact(r)))
      throw Unsupported("a mutable " + std::string(Py_TYPE(r)->tp_name) + " from " + py_repr(fn));
    return constant(r);
  }
  // torch functions that are a tensor's metadata methods (torch.is_floating_point(x) is
  // x.is_floating_point()): answered by the method's intrinsic.
  static const std::pair<PyObject*, const char*> metadata_functions[] = {
      {resolve_python_name("torch.is_floating_point"), "is_floating_point"},
      {resolve_python_name("torch.is_complex"), "is_complex"},
      {resolve_python_name("torch.numel"), "numel"}};
  for (const auto& [f, method] : metadata_functions)
    if (f && fn == f && args.size() == 1 && kwargs.empty() && args[0].is_tensor())
      return call_tensor_method(args[0], method, {}, {});
  // torch functions that only read global state, and tracing/scripting probes.
  static PyObject* is_grad_enabled = resolve_python_name("torch.is_grad_enabled");
  if (fn == is_grad_enabled && args.empty()) return constant(ctx_.grad_enabled ? Py_True : Py_False);
  // Guarded with the global state (runtime/guards.cpp): torchvision's roi_align reads it.
  static PyObject* get_deterministic = resolve_python_name("torch._C._get_deterministic_algorithms");
  if (fn == get_deterministic && args.empty() && kwargs.empty())
    return constant(at::globalContext().deterministicAlgorithms() ? Py_True : Py_False);
  // Autocast as the trace saw it (guards check it): torch.is_autocast_enabled() is CUDA's,
  // torch.is_autocast_enabled("cpu") a device type's.
  static PyObject* is_autocast_enabled = resolve_python_name("torch.is_autocast_enabled");
  static PyObject* is_autocast_cpu_enabled = resolve_python_name("torch.is_autocast_cpu_enabled");
  if (is_autocast_cpu_enabled && fn == is_autocast_cpu_enabled && args.empty() && kwargs.empty())
    return constant(ctx_.autocast.cpu ? Py_True : Py_False);
  if (is_autocast_enabled && fn == is_autocast_enabled && kwargs.empty()) {
    if (args.empty()) return constant(ctx_.autocast.cuda ? Py_True : Py_False);
    if (args.size() == 1 && args[0].is_constant() && PyUnicode_Check(args[0].obj)) {
      const std::string type = PyUnicode_AsUTF8(args[0].obj);
      if (type == "cpu" || type == "cuda")
        return constant(ctx_.autocast.on(type == "cpu" ? c10::DeviceType::CPU : c10::DeviceType::CUDA) ? Py_True : Py_False);
    }
  }
  static PyObject* tracing_state = resolve_python_name("torch._C._get_tracing_state");
  if (tracing_state && fn == tracing_state && args.empty()) return constant(Py_None);
  // Usage telemetry (nn.Module construction, torch.hub...): logged once per process and key, so
  // the trace logs it once, for real, and the compiled code need not.
  static PyObject* log_api_usage = resolve_python_name("torch._C._log_api_usage_once");
  if (log_api_usage && fn == log_api_usage && args.size() == 1 && kwargs.empty() && args[0].is_constant() &&
      PyUnicode_Check(args[0].obj)) {
    PyOwned r(PyObject_CallOneArg(fn, args[0].obj));
    if (!r.p) {
      PyErr_Clear();
      throw Unsupported("torch._C._log_api_usage_once raised");
    }
    return constant(Py_None);
  }
  if (is_lru_cache(fn)) throw Unsupported("call to " + py_repr(fn) + " (an lru_cache; its function is not marked constant, or an argument is not)");
  throw Unsupported("call to " + py_repr(fn) + " is not supported");
}

}  // namespace fastdyn::symbolic
