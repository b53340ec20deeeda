// symbolic/interpreter.cpp — the instruction loop and its handlers (algorithm in interpreter.h).
//
// Handlers are small functions grouped by family (loads/stores, stack, operators, subscripts,
// building, calls, returns) and registered by opcode NAME in one table; names the target Python
// lacks are skipped, so 3.11- and 3.12-only opcodes share the table. Where the two versions
// encode an argument differently the handler tests python_minor().
#include <torch/csrc/Device.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DefaultDtype.h>

#include <array>
#include <cstring>

#include "runtime/errors.h"
#include "symbolic/assembler.h"
#include "symbolic/opcodes.h"
#include "symbolic/py_ops.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {

using codegen::Family;

TraceResult::~TraceResult() {
  for (GuardSpec& g : guards) Py_CLEAR(g.obj);
}

std::string source_name(const Source& s) {
  switch (s.kind) {
    case Source::Kind::Local: return "L['" + s.name + "']";
    case Source::Kind::Global: return "G['" + s.name + "']";
    case Source::Kind::Builtin: return "B['" + s.name + "']";
    case Source::Kind::Closure: return "C['" + s.name + "']";
    case Source::Kind::Attr: return source_name(*s.parent) + "." + s.name;
    case Source::Kind::Item: return source_name(*s.parent) + "[" + std::to_string(s.index) + "]";
    case Source::Kind::DictItem: return source_name(*s.parent) + "['" + s.name + "']";
  }
  return "?";
}

namespace {

// Python builtins that are pure on constant arguments and may be folded at trace time.
bool is_foldable_builtin(PyObject* fn) {
  static const char* names[] = {"len", "min", "max", "abs", "int", "float", "bool", "tuple",
                                "list", "sum", "round", "divmod", "isinstance", "pow", "range",
                                "str", "slice", "all", "any", "reversed", "sorted"};
  if (!PyCFunction_Check(fn) && !PyType_Check(fn)) return false;
  PyObject* builtins = PyEval_GetBuiltins();
  for (const char* n : names)
    if (PyDict_GetItemString(builtins, n) == fn) return true;
  return false;
}

bool is_math_function(PyObject* fn) {
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

struct PyOwned {  // one owned reference, released at scope exit
  PyObject* p;
  explicit PyOwned(PyObject* o) : p(o) {}
  ~PyOwned() { Py_XDECREF(p); }
  PyOwned(const PyOwned&) = delete;
  PyOwned& operator=(const PyOwned&) = delete;
};

}  // namespace

Tracer::Tracer(const FrameInputs& frame, TraceResult& result) : frame_(frame), result_(result) {
  ctx_.grad_enabled = at::GradMode::is_enabled();
  ctx_.default_dtype = c10::typeMetaToScalarType(c10::get_default_dtype());
  code_ = decode(frame.code);
  nargs_ = argument_slots(frame.code);
  locals_.resize(static_cast<size_t>(frame.code->co_nlocalsplus));
}

SymValue Tracer::pop() {
  FD_CHECK(!stack_.empty(), "symbolic stack underflow");
  SymValue v = std::move(stack_.back());
  stack_.pop_back();
  return v;
}

SymValue& Tracer::top(int depth) {
  FD_CHECK(static_cast<int>(stack_.size()) > depth, "symbolic stack underflow");
  return stack_[stack_.size() - 1 - static_cast<size_t>(depth)];
}

SymValue Tracer::load_global(const std::string& name) {
  auto src = std::make_shared<Source>();
  src->name = name;
  PyObject* v = PyDict_GetItemString(frame_.globals, name.c_str());
  if (v) {
    src->kind = Source::Kind::Global;
    return wrap(v, src);
  }
  v = PyDict_GetItemString(frame_.builtins, name.c_str());
  if (!v) throw Unsupported("name '" + name + "' is not defined");
  src->kind = Source::Kind::Builtin;  // guarded: no global of this name may appear later
  return wrap(v, src);
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
  codegen::CaptureResult r = codegen::record_call(result_.graph, ctx_, fam, args, kwargs);
  if (!r.ok) throw Unsupported(std::string(what) + ": " + r.reason);
  return from_capture(fam, r);
}

SymValue Tracer::tensor_attr(const SymValue& t, const std::string& name) {
  const codegen::TensorMeta& m = meta(t);
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
  if (name == "is_cuda") return constant(m.device.is_cuda() ? Py_True : Py_False);
  if (name == "is_cpu") return constant(m.device.is_cpu() ? Py_True : Py_False);
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

SymValue Tracer::load_attr(const SymValue& owner, const std::string& name) {
  if (owner.is_tensor()) return tensor_attr(owner, name);
  if (owner.kind == SymValue::Kind::NamedTuple)
    for (size_t i = 0; i < owner.field_names.size(); ++i)
      if (owner.field_names[i] == name) return owner.items[i];
  if (!owner.is_constant()) throw Unsupported("attribute '" + name + "' of " + describe(owner));
  PyObject* o = owner.obj;
  PyObject* value = nullptr;
  if (PyModule_Check(o)) {
    value = PyDict_GetItemString(PyModule_GetDict(o), name.c_str());
    Py_XINCREF(value);
    if (!value) value = PyObject_GetAttrString(o, name.c_str());  // module __getattr__
  } else if (PyType_Check(o) || foldable_constant(o) || PyCFunction_Check(o)) {
    value = PyObject_GetAttrString(o, name.c_str());
  } else {
    // A plain object: only instance-dict attributes are read at trace time (no properties or
    // descriptors, whose code could have side effects). nn.Module keeps parameters, buffers and
    // submodules in three dicts that its __getattr__ searches after the instance dict.
    PyObject** dictptr = _PyObject_GetDictPtr(o);
    PyOwned key(PyUnicode_InternFromString(name.c_str()));
    PyObject* type_attr = _PyType_Lookup(Py_TYPE(o), key.p);  // borrowed
    const bool data_descriptor = type_attr && Py_TYPE(type_attr)->tp_descr_set;
    const char* slot_found = nullptr;  // the nn.Module dict holding the attribute, if any
    if (dictptr && *dictptr && !data_descriptor) {
      PyObject* dict = *dictptr;
      value = PyDict_GetItemWithError(dict, key.p);
      if (!value && !type_attr && PyObject_IsInstance(o, module_type()) == 1) {
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
    if (!value) {
      PyErr_Clear();
      throw Unsupported("attribute '" + name + "' of " + Py_TYPE(o)->tp_name +
                        " object is not a plain instance attribute");
    }
    if (slot_found && owner.source) {
      // Read it where nn.Module keeps it, so guards and the transformed code do a dict lookup
      // instead of calling Module.__getattr__.
      PyOwned owned(value);
      auto slot_src = std::make_shared<Source>();
      slot_src->kind = Source::Kind::Attr;
      slot_src->name = slot_found;
      slot_src->parent = owner.source;
      auto src = std::make_shared<Source>();
      src->kind = Source::Kind::DictItem;
      src->name = name;
      src->parent = slot_src;
      return wrap(value, src);
    }
  }
  if (!value) {
    PyErr_Clear();
    throw Unsupported("attribute '" + name + "' of " + describe(owner) + " does not exist");
  }
  PyOwned owned(value);
  if (!owner.source) return constant(value);  // attribute of an immutable trace-time constant
  auto src = std::make_shared<Source>();
  src->kind = Source::Kind::Attr;
  src->name = name;
  src->parent = owner.source;
  return wrap(value, src);
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
    if ((name == "numel" || name == "nelement") && args.empty()) return int_obj(m.numel());
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

SymValue Tracer::call(const SymValue& callable, std::vector<SymValue> args,
                      std::vector<std::pair<std::string, SymValue>> kwargs) {
  if (callable.kind == SymValue::Kind::Method)
    return call_tensor_method(callable.items[0], callable.name, std::move(args), std::move(kwargs));
  if (!callable.is_constant()) throw Unsupported("call of " + describe(callable));
  PyObject* fn = callable.obj;
  if (auto fam = family_of_object(fn)) return call_family(*fam, args, kwargs, py_repr(fn).c_str());
  // Pure functions on constants: builtins, math, operator.
  bool all_const = true;
  for (const SymValue& a : args) all_const = all_const && a.is_python_constant();
  for (const auto& kv : kwargs) all_const = all_const && kv.second.is_python_constant();
  if ((is_foldable_builtin(fn) || is_math_function(fn))) {
    // len/isinstance on tensors are answered from metadata.
    PyObject* builtins = PyEval_GetBuiltins();
    if (fn == PyDict_GetItemString(builtins, "len") && args.size() == 1 && args[0].is_tensor()) {
      const auto& m = meta(args[0]);
      if (m.dim() == 0) throw Unsupported("len() of a 0-d tensor");
      PyOwned n(PyLong_FromLongLong(m.sizes[0]));
      return constant(n.p);
    }
    if (fn == PyDict_GetItemString(builtins, "len") && args.size() == 1 &&
        (args[0].kind == SymValue::Kind::Tuple || args[0].kind == SymValue::Kind::List)) {
      PyOwned n(PyLong_FromSsize_t(static_cast<Py_ssize_t>(args[0].items.size())));
      return constant(n.p);
    }
    if (fn == PyDict_GetItemString(builtins, "isinstance") && args.size() == 2 && args[0].is_tensor() &&
        args[1].is_constant()) {
      int r = PyObject_IsSubclass(tensor_type(), args[1].obj);
      if (r < 0) { PyErr_Clear(); throw Unsupported("isinstance() with " + describe(args[1])); }
      return constant(r ? Py_True : Py_False);
    }
    if (all_const) {
      PyOwned tuple(PyTuple_New(static_cast<Py_ssize_t>(args.size())));
      for (size_t i = 0; i < args.size(); ++i) {
        PyObject* o = materialize(args[i]);
        if (!o) throw Unsupported("argument of " + py_repr(fn));
        PyTuple_SET_ITEM(tuple.p, static_cast<Py_ssize_t>(i), o);
      }
      PyOwned kw(kwargs.empty() ? nullptr : PyDict_New());
      for (const auto& [k, v] : kwargs) {
        PyOwned o(materialize(v));
        PyDict_SetItemString(kw.p, k.c_str(), o.p);
      }
      PyObject* r = PyObject_Call(fn, tuple.p, kw.p);
      if (!r) {
        PyErr_Clear();
        throw Unsupported("call of " + py_repr(fn) + " raised on constant arguments");
      }
      PyOwned owned(r);
      if (PyObject_TypeCheck(r, &PyRange_Type) || PyIter_Check(r))
        throw Unsupported("iterator from " + py_repr(fn));
      return constant(r);
    }
  }
  // torch functions that only read global state.
  static PyObject* is_grad_enabled = resolve_python_name("torch.is_grad_enabled");
  if (fn == is_grad_enabled && args.empty()) return constant(ctx_.grad_enabled ? Py_True : Py_False);
  throw Unsupported("call to " + py_repr(fn) + " is not supported");
}

SymValue Tracer::binary(const char* symbol, const SymValue& a, const SymValue& b) {
  const std::string sym = symbol;
  if (a.is_python_constant() && b.is_python_constant()) {
    PyOwned x(materialize(a)), y(materialize(b));
    if (!foldable_constant(x.p) || !foldable_constant(y.p))
      throw Unsupported("operator " + sym + " on " + describe(a) + " and " + describe(b));
    PyObject* r = nullptr;
    static const char* cmp[] = {"<", "<=", "==", "!=", ">", ">="};
    for (int i = 0; i < 6; ++i)
      if (sym == cmp[i]) {
        static const int ops[] = {Py_LT, Py_LE, Py_EQ, Py_NE, Py_GT, Py_GE};
        r = PyObject_RichCompare(x.p, y.p, ops[i]);
      }
    if (!r) r = fold_binary(sym, x.p, y.p);
    if (!r) {
      PyErr_Clear();
      throw Unsupported("operator " + sym + " on " + describe(a) + " and " + describe(b) + " raised");
    }
    PyOwned owned(r);
    return constant(r);
  }
  if (!a.is_tensor() && !b.is_tensor())
    throw Unsupported("operator " + sym + " on " + describe(a) + " and " + describe(b));
  const char* op_name = operator_name(sym);
  auto fam = op_name ? family_of_name(op_name) : std::nullopt;
  if (!fam) throw Unsupported(std::string("tensor operator ") + sym + " (" + (op_name ? op_name : "?") + ") is not in the op table");
  return call_family(*fam, {a, b}, {}, op_name);
}

SymValue Tracer::subscript(const SymValue& container, const SymValue& index) {
  if (container.is_tensor()) {
    auto fam = family_of_name("operator.getitem");
    if (!fam) throw Unsupported("tensor subscripts are not in the op table");
    return record(*fam, {to_call_arg(container), index_arg(index)}, {}, "Tensor.__getitem__");
  }
  if ((container.kind == SymValue::Kind::Tuple || container.kind == SymValue::Kind::List ||
       container.kind == SymValue::Kind::NamedTuple) && index.is_constant()) {
    if (PyLong_Check(index.obj)) {
      Py_ssize_t i = PyLong_AsSsize_t(index.obj);
      const Py_ssize_t n = static_cast<Py_ssize_t>(container.items.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) throw Unsupported("index out of range");
      return container.items[static_cast<size_t>(i)];
    }
    if (PySlice_Check(index.obj)) {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(index.obj, &start, &stop, &step) < 0) { PyErr_Clear(); throw Unsupported("bad slice"); }
      Py_ssize_t len = PySlice_AdjustIndices(static_cast<Py_ssize_t>(container.items.size()), &start, &stop, step);
      std::vector<SymValue> items;
      for (Py_ssize_t k = 0; k < len; ++k) items.push_back(container.items[static_cast<size_t>(start + k * step)]);
      SymValue out = SymValue::tuple(std::move(items));
      if (container.kind == SymValue::Kind::List) out.kind = SymValue::Kind::List;
      return out;
    }
  }
  if (container.is_python_constant() && index.is_python_constant()) {
    PyOwned c(materialize(container)), i(materialize(index));
    if (!foldable_constant(c.p) && !THPSize_Check(c.p)) throw Unsupported("subscript of " + describe(container));
    PyObject* r = PyObject_GetItem(c.p, i.p);
    if (!r) { PyErr_Clear(); throw Unsupported("subscript of " + describe(container) + " raised"); }
    PyOwned owned(r);
    return constant(r);
  }
  throw Unsupported("subscript of " + describe(container) + " with " + describe(index));
}

std::vector<SymValue> Tracer::unpack(const SymValue& seq, int n) {
  std::vector<SymValue> items;
  if (seq.kind == SymValue::Kind::Tuple || seq.kind == SymValue::Kind::List || seq.kind == SymValue::Kind::NamedTuple) {
    items = seq.items;
  } else if (seq.is_constant() && (PyTuple_Check(seq.obj) || PyList_Check(seq.obj))) {
    PyOwned fast(PySequence_Fast(seq.obj, ""));
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast.p); ++i)
      items.push_back(constant(PySequence_Fast_GET_ITEM(fast.p, i)));
  } else if (seq.is_tensor()) {
    auto fam = family_of_tensor_attr("unbind");
    if (!fam) throw Unsupported("unpacking a tensor needs Tensor.unbind");
    SymValue parts = call_family(*fam, {seq}, {}, "Tensor.__iter__");
    items = parts.items;
  } else {
    throw Unsupported("unpacking " + describe(seq));
  }
  if (static_cast<int>(items.size()) != n)
    throw Unsupported("unpacking " + std::to_string(items.size()) + " values into " + std::to_string(n));
  return items;
}

// ---------------------------------------------------------------------------------------------
// Handlers

struct Handlers {
  using Fn = void (*)(Tracer&, const Instruction&);

  static PyObject* name_at(Tracer& t, int i) { return PyTuple_GET_ITEM(t.frame_.code->co_names, i); }
  static std::string str_name(Tracer& t, int i) { return PyUnicode_AsUTF8(name_at(t, i)); }

  // ---- no-ops and prologue
  // COPY_FREE_VARS and MAKE_CELL are no-ops too: free variables are read from the closure.
  static void nop(Tracer&, const Instruction&) {}

  // ---- loads and stores
  static void load_fast(Tracer& t, const Instruction& in) {
    auto& slot = t.locals_[static_cast<size_t>(in.arg)];
    if (!slot) {
      if (in.arg < t.nargs_) {
        PyObject* obj = t.frame_.localsplus[in.arg];
        if (!obj) throw Unsupported("argument slot is empty");
        auto src = std::make_shared<Source>();
        src->kind = Source::Kind::Local;
        src->index = in.arg;
        src->name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(t.frame_.code->co_localsplusnames, in.arg));
        slot = t.wrap(obj, src);
      } else {
        throw Unsupported("local variable read before assignment");
      }
    }
    t.push(*slot);
  }
  // NB: an argument overwritten before it is read is never wrapped, so it needs no guard.
  static void store_fast(Tracer& t, const Instruction& in) {
    t.locals_[static_cast<size_t>(in.arg)] = t.pop();
  }
  static void delete_fast(Tracer& t, const Instruction& in) { t.locals_[static_cast<size_t>(in.arg)].reset(); }
  static void load_const(Tracer& t, const Instruction& in) {
    t.push(Tracer::constant(PyTuple_GET_ITEM(t.frame_.code->co_consts, in.arg)));
  }
  static void return_const(Tracer& t, const Instruction& in) {
    load_const(t, in);
    return_value(t, in);
  }
  static void load_global(Tracer& t, const Instruction& in) {
    const int namei = in.arg >> 1;
    if (in.arg & 1) t.push(SymValue::null());
    t.push(t.load_global(str_name(t, namei)));
  }
  static void load_deref(Tracer& t, const Instruction& in) {
    const int nfree = t.frame_.code->co_nfreevars;
    const int first_free = t.frame_.code->co_nlocalsplus - nfree;
    if (in.arg < first_free || !t.frame_.closure) throw Unsupported("cell variable (closure over a local)");
    const int ci = in.arg - first_free;
    PyObject* cell = PyTuple_GET_ITEM(t.frame_.closure, ci);
    PyObject* v = PyCell_GET(cell);
    if (!v) throw Unsupported("free variable referenced before assignment");
    auto src = std::make_shared<Source>();
    src->kind = Source::Kind::Closure;
    src->index = ci;
    src->name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(t.frame_.code->co_localsplusnames, in.arg));
    t.push(t.wrap(v, src));
  }
  static void load_attr(Tracer& t, const Instruction& in) {
    int namei = in.arg;
    bool method = false;
    if (python_minor() >= 12) {
      method = in.arg & 1;
      namei = in.arg >> 1;
    }
    SymValue owner = t.pop();
    SymValue v = t.load_attr(owner, str_name(t, namei));
    if (method) t.push(SymValue::null());
    t.push(std::move(v));
  }
  static void load_method(Tracer& t, const Instruction& in) {  // 3.11
    SymValue owner = t.pop();
    SymValue v = t.load_attr(owner, str_name(t, in.arg));
    t.push(SymValue::null());
    t.push(std::move(v));
  }

  // ---- stack
  static void pop_top(Tracer& t, const Instruction&) { t.pop(); }
  static void push_null(Tracer& t, const Instruction&) { t.push(SymValue::null()); }
  static void copy(Tracer& t, const Instruction& in) { t.push(t.top(in.arg - 1)); }
  static void swap(Tracer& t, const Instruction& in) { std::swap(t.top(0), t.top(in.arg - 1)); }

  // ---- operators
  static void binary_op(Tracer& t, const Instruction& in) {
    SymValue b = t.pop();
    SymValue a = t.pop();
    const char* sym = binary_op_symbol(in.arg);
    FD_CHECK(sym, "bad BINARY_OP oparg");
    t.push(t.binary(sym, a, b));
  }
  static void compare_op(Tracer& t, const Instruction& in) {
    SymValue b = t.pop();
    SymValue a = t.pop();
    const char* sym = compare_op_symbol(python_minor() >= 12 ? in.arg >> 4 : in.arg);
    FD_CHECK(sym, "bad COMPARE_OP oparg");
    t.push(t.binary(sym, a, b));
  }
  static void is_op(Tracer& t, const Instruction& in) {
    SymValue b = t.pop();
    SymValue a = t.pop();
    bool same;
    if (a.is_constant() && b.is_constant()) same = a.obj == b.obj;
    else if (a.is_tensor() && b.is_tensor()) same = a.tensor == b.tensor;
    else if ((a.is_tensor() && b.is_constant()) || (b.is_tensor() && a.is_constant())) same = false;
    else throw Unsupported("'is' on " + describe(a) + " and " + describe(b));
    t.push(Tracer::constant(same != (in.arg == 1) ? Py_True : Py_False));
  }
  static void unary(Tracer& t, const char* op_name, PyObject* (*fold)(PyObject*)) {
    SymValue a = t.pop();
    if (a.is_constant() && foldable_constant(a.obj)) {
      PyObject* r = fold(a.obj);
      if (!r) { PyErr_Clear(); throw Unsupported(std::string(op_name) + " on " + describe(a) + " raised"); }
      PyOwned owned(r);
      t.push(Tracer::constant(r));
      return;
    }
    if (!a.is_tensor()) throw Unsupported(std::string(op_name) + " on " + describe(a));
    auto fam = family_of_name(op_name);
    if (!fam) throw Unsupported(std::string(op_name) + " is not in the op table");
    t.push(t.call_family(*fam, {a}, {}, op_name));
  }
  static void unary_negative(Tracer& t, const Instruction&) { unary(t, "operator.neg", PyNumber_Negative); }
  static void unary_positive(Tracer& t, const Instruction&) { unary(t, "operator.pos", PyNumber_Positive); }
  static void unary_invert(Tracer& t, const Instruction&) { unary(t, "operator.invert", PyNumber_Invert); }
  static void unary_not(Tracer& t, const Instruction&) {
    SymValue a = t.pop();
    if (!a.is_constant()) throw Unsupported("'not' on " + describe(a) + " depends on tensor data");
    int r = PyObject_IsTrue(a.obj);
    if (r < 0) { PyErr_Clear(); throw Unsupported("'not' raised"); }
    t.push(Tracer::constant(r ? Py_False : Py_True));
  }
  static void call_intrinsic_1(Tracer& t, const Instruction& in) {  // 3.12
    // 5 = INTRINSIC_UNARY_POSITIVE, 6 = INTRINSIC_LIST_TO_TUPLE
    if (in.arg == 5) return unary_positive(t, in);
    if (in.arg == 6) return list_to_tuple(t, in);
    throw Unsupported("CALL_INTRINSIC_1 " + std::to_string(in.arg));
  }

  // ---- subscripts
  static void binary_subscr(Tracer& t, const Instruction&) {
    SymValue index = t.pop();
    SymValue container = t.pop();
    t.push(t.subscript(container, index));
  }
  static void binary_slice(Tracer& t, const Instruction&) {  // 3.12: container, start, stop
    SymValue stop = t.pop();
    SymValue start = t.pop();
    SymValue container = t.pop();
    SymValue s;
    s.kind = SymValue::Kind::Slice;
    s.items = {start, stop, Tracer::constant(Py_None)};
    t.push(t.subscript(container, fold_slice(t, std::move(s))));
  }
  static SymValue fold_slice(Tracer& t, SymValue s) {
    if (!s.is_python_constant()) throw Unsupported("slice with a tensor bound");
    PyOwned obj(t.materialize(s));
    return Tracer::constant(obj.p);
  }
  static void build_slice(Tracer& t, const Instruction& in) {
    SymValue step = in.arg == 3 ? t.pop() : Tracer::constant(Py_None);
    SymValue stop = t.pop();
    SymValue start = t.pop();
    SymValue s;
    s.kind = SymValue::Kind::Slice;
    s.items = {start, stop, step};
    t.push(fold_slice(t, std::move(s)));
  }

  // ---- building
  static std::vector<SymValue> pop_n(Tracer& t, int n) {
    std::vector<SymValue> items(static_cast<size_t>(n));
    for (int i = n - 1; i >= 0; --i) items[static_cast<size_t>(i)] = t.pop();
    return items;
  }
  static void build_tuple(Tracer& t, const Instruction& in) { t.push(SymValue::tuple(pop_n(t, in.arg))); }
  static void build_list(Tracer& t, const Instruction& in) {
    SymValue v = SymValue::tuple(pop_n(t, in.arg));
    v.kind = SymValue::Kind::List;
    t.push(std::move(v));
  }
  static void list_extend(Tracer& t, const Instruction& in) {
    SymValue seq = t.pop();
    SymValue& list = t.top(in.arg - 1);
    if (list.kind != SymValue::Kind::List) throw Unsupported("LIST_EXTEND on " + describe(list));
    std::vector<SymValue> items;
    if (seq.kind == SymValue::Kind::Tuple || seq.kind == SymValue::Kind::List) items = seq.items;
    else items = t.unpack(seq, seq.is_constant() ? static_cast<int>(PyObject_Length(seq.obj)) : -1);
    for (auto& i : items) list.items.push_back(std::move(i));
  }
  static void list_append(Tracer& t, const Instruction& in) {
    SymValue v = t.pop();
    SymValue& list = t.top(in.arg - 1);
    if (list.kind != SymValue::Kind::List) throw Unsupported("LIST_APPEND on " + describe(list));
    list.items.push_back(std::move(v));
  }
  static void list_to_tuple(Tracer& t, const Instruction&) {
    SymValue v = t.pop();
    if (v.kind != SymValue::Kind::List) throw Unsupported("LIST_TO_TUPLE on " + describe(v));
    v.kind = SymValue::Kind::Tuple;
    t.push(std::move(v));
  }
  static void unpack_sequence(Tracer& t, const Instruction& in) {
    std::vector<SymValue> items = t.unpack(t.pop(), in.arg);
    for (auto it = items.rbegin(); it != items.rend(); ++it) t.push(std::move(*it));
  }

  // ---- calls
  static void kw_names(Tracer& t, const Instruction& in) {
    t.kw_names_ = PyTuple_GET_ITEM(t.frame_.code->co_consts, in.arg);
  }
  static void call(Tracer& t, const Instruction& in) {
    std::vector<SymValue> args = pop_n(t, in.arg);
    SymValue callable = t.pop();
    SymValue head = t.pop();
    if (head.kind != SymValue::Kind::Null) {  // method form: head is the callable, then self
      args.insert(args.begin(), std::move(callable));
      callable = std::move(head);
    }
    std::vector<std::pair<std::string, SymValue>> kwargs;
    if (t.kw_names_) {
      const Py_ssize_t nk = PyTuple_GET_SIZE(t.kw_names_);
      const size_t first_kw = args.size() - static_cast<size_t>(nk);
      for (Py_ssize_t k = 0; k < nk; ++k)
        kwargs.emplace_back(PyUnicode_AsUTF8(PyTuple_GET_ITEM(t.kw_names_, k)), std::move(args[first_kw + k]));
      args.resize(first_kw);
      t.kw_names_ = nullptr;
    }
    t.push(t.call(callable, std::move(args), std::move(kwargs)));
  }
  static void call_function_ex(Tracer& t, const Instruction& in) {
    SymValue kw = (in.arg & 1) ? t.pop() : SymValue();
    SymValue star = t.pop();
    SymValue callable = t.pop();
    SymValue head = t.pop();  // NULL in 3.11/3.12
    if (head.kind != SymValue::Kind::Null) throw Unsupported("CALL_FUNCTION_EX with a method");
    std::vector<SymValue> args;
    if (star.kind == SymValue::Kind::Tuple || star.kind == SymValue::Kind::List) args = star.items;
    else if (star.is_constant() && PyTuple_Check(star.obj)) args = t.unpack(star, static_cast<int>(PyTuple_GET_SIZE(star.obj)));
    else throw Unsupported("*args of " + describe(star));
    std::vector<std::pair<std::string, SymValue>> kwargs;
    if (in.arg & 1) {
      if (!kw.is_constant() || !PyDict_Check(kw.obj)) throw Unsupported("**kwargs of " + describe(kw));
      PyObject *k, *v;
      Py_ssize_t pos = 0;
      while (PyDict_Next(kw.obj, &pos, &k, &v)) kwargs.emplace_back(PyUnicode_AsUTF8(k), Tracer::constant(v));
    }
    t.push(t.call(callable, std::move(args), std::move(kwargs)));
  }

  // ---- returns
  static void return_value(Tracer& t, const Instruction&) {
    t.result_.return_value = t.pop();
    t.done_ = true;
  }

  static const std::array<Fn, 256>& table() {
    static const std::array<Fn, 256> tbl = [] {
      std::array<Fn, 256> a{};
      const std::pair<const char*, Fn> by_name[] = {
          {"NOP", nop}, {"RESUME", nop}, {"PRECALL", nop}, {"MAKE_CELL", nop},
          {"COPY_FREE_VARS", nop}, {"EXTENDED_ARG", nop},
          {"LOAD_FAST", load_fast}, {"LOAD_FAST_CHECK", load_fast}, {"STORE_FAST", store_fast},
          {"DELETE_FAST", delete_fast}, {"LOAD_CONST", load_const}, {"RETURN_CONST", return_const},
          {"LOAD_GLOBAL", load_global}, {"LOAD_DEREF", load_deref}, {"LOAD_ATTR", load_attr},
          {"LOAD_METHOD", load_method}, {"POP_TOP", pop_top}, {"PUSH_NULL", push_null},
          {"COPY", copy}, {"SWAP", swap}, {"BINARY_OP", binary_op}, {"COMPARE_OP", compare_op},
          {"IS_OP", is_op}, {"UNARY_NEGATIVE", unary_negative}, {"UNARY_POSITIVE", unary_positive},
          {"UNARY_INVERT", unary_invert}, {"UNARY_NOT", unary_not},
          {"CALL_INTRINSIC_1", call_intrinsic_1}, {"BINARY_SUBSCR", binary_subscr},
          {"BINARY_SLICE", binary_slice}, {"BUILD_SLICE", build_slice}, {"BUILD_TUPLE", build_tuple},
          {"BUILD_LIST", build_list}, {"LIST_EXTEND", list_extend}, {"LIST_APPEND", list_append},
          {"LIST_TO_TUPLE", list_to_tuple}, {"UNPACK_SEQUENCE", unpack_sequence},
          {"KW_NAMES", kw_names}, {"CALL", call}, {"CALL_FUNCTION_EX", call_function_ex},
          {"RETURN_VALUE", return_value},
      };
      for (int op = 0; op < 256; ++op) {
        const char* name = opcode_info(static_cast<uint8_t>(op)).name;
        if (!name) continue;
        for (const auto& [n, fn] : by_name)
          if (std::strcmp(n, name) == 0) a[op] = fn;
      }
      return a;
    }();
    return tbl;
  }
};

void Tracer::run() {
  const auto& table = Handlers::table();
  for (size_t pc = 0; pc < code_.size() && !done_; ++pc) {
    const Instruction& in = code_[pc];
    result_.lineno = in.line;
    Handlers::Fn fn = table[in.opcode];
    if (!fn) throw Unsupported(std::string("opcode ") + opcode_info(in.opcode).name + " is not supported");
    fn(*this, in);
  }
  if (!done_) throw Unsupported("the code ran off its end");
}

TraceResult trace_frame(const FrameInputs& frame) {
  TraceResult result;
  result.filename = PyUnicode_AsUTF8(frame.code->co_filename);
  result.lineno = frame.code->co_firstlineno;
  try {
    Tracer tracer(frame, result);
    tracer.run();
    result.ok = true;
  } catch (const Unsupported& e) {
    result.ok = false;
    result.reason = e.what();
  } catch (const c10::Error& e) {
    result.ok = false;
    result.reason = std::string("torch error during tracing: ") + e.what_without_backtrace();
  }
  if (PyErr_Occurred()) PyErr_Clear();
  return result;
}

}  // namespace fastdyn::symbolic
