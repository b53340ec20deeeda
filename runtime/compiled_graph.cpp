// runtime/compiled_graph.cpp — the native callable type behind compiled graphs.
#include "runtime/tensor_check.h"
#include "runtime/compiled_graph.h"
#include "runtime/graph_calls.h"

#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/Exceptions.h>

#include <cstddef>
#include <new>

#include "runtime/accuracy_check.h"
#include "runtime/errors.h"

namespace fastdyn::runtime {

OutputTemplate::OutputTemplate(const OutputTemplate& o)
    : kind(o.kind), output(o.output), constant(o.constant), items(o.items), tuple_new(o.tuple_new) {
  Py_XINCREF(constant);
}

OutputTemplate& OutputTemplate::operator=(const OutputTemplate& o) {
  if (this != &o) {
    Py_XINCREF(o.constant);
    Py_XDECREF(constant);
    kind = o.kind;
    output = o.output;
    constant = o.constant;
    items = o.items;
    tuple_new = o.tuple_new;
  }
  return *this;
}

OutputTemplate::~OutputTemplate() { Py_XDECREF(constant); }

namespace {

constexpr int64_t kReleaseGilElements = 1 << 15;

struct CompiledGraphObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  ExecutablePtr exe;
  OutputTemplate out;
  std::string name;
};

// New reference, or nullptr with an exception set.
PyObject* build(const OutputTemplate& t, std::vector<at::Tensor>& outputs, std::vector<PyObject*>& wrapped) {
  switch (t.kind) {
    case OutputTemplate::Kind::Output: {
      PyObject*& w = wrapped[t.output];
      if (!w) w = THPVariable_Wrap(std::move(outputs[t.output]));
      Py_XINCREF(w);
      return w;
    }
    case OutputTemplate::Kind::Constant:
      return Py_NewRef(t.constant);
    case OutputTemplate::Kind::NamedTuple: {  // torch.return_types.* are struct sequences
      OutputTemplate plain = t;
      plain.kind = OutputTemplate::Kind::Tuple;
      PyObject* items = build(plain, outputs, wrapped);
      if (!items) return nullptr;
      PyObject* r = nullptr;
      if (t.tuple_new) {
        PyObject* args = PyTuple_Pack(1, items);
        if (args) r = PyTuple_Type.tp_new(reinterpret_cast<PyTypeObject*>(t.constant), args, nullptr);
        Py_XDECREF(args);
      } else {
        r = PyObject_CallOneArg(t.constant, items);
      }
      Py_DECREF(items);
      return r;
    }
    case OutputTemplate::Kind::Tuple:
    case OutputTemplate::Kind::List: {
      const Py_ssize_t n = static_cast<Py_ssize_t>(t.items.size());
      const bool tuple = t.kind == OutputTemplate::Kind::Tuple;
      PyObject* seq = tuple ? PyTuple_New(n) : PyList_New(n);
      if (!seq) return nullptr;
      for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* item = build(t.items[i], outputs, wrapped);
        if (!item) { Py_DECREF(seq); return nullptr; }
        if (tuple) PyTuple_SET_ITEM(seq, i, item);
        else PyList_SET_ITEM(seq, i, item);
      }
      return seq;
    }
  }
  return nullptr;
}


thread_local int t_fail_runs = 0;  // test_fail_graph_runs

PyObject* compiled_graph_run(PyObject* self_obj, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<CompiledGraphObject*>(self_obj);
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (kwnames && PyTuple_GET_SIZE(kwnames) > 0) {
    PyErr_SetString(PyExc_TypeError, "compiled graph takes no keyword arguments");
    return nullptr;
  }
  HANDLE_TH_ERRORS
  std::vector<at::Tensor> inputs;
  inputs.reserve(static_cast<size_t>(nargs));
  int64_t elements = 0;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (!is_tensor_object(args[i])) {
      PyErr_Format(PyExc_TypeError, "compiled graph %s: input %zd is %s, not a tensor",
                   self->name.c_str(), i, Py_TYPE(args[i])->tp_name);
      return nullptr;
    }
    inputs.push_back(THPVariable_Unpack(args[i]));
    elements += inputs.back().numel();
  }
  std::vector<at::Tensor> outputs;
  const CheckLabel label(self->name);  // accuracy mode: divergences name the function
  try {
    if (t_fail_runs > 0 && t_fail_runs--) throw InternalError("injected run-time failure (test hook) in " + self->name);
    if (elements < kReleaseGilElements) {
      outputs = self->exe->run(inputs);
    } else {
      // NB: big graphs run without the GIL, as eager PyTorch's ops do; for tiny ones releasing
      // and re-taking it costs more than the work it would let other threads do.
      pybind11::gil_scoped_release no_gil;
      outputs = self->exe->run(inputs);
    }
  } catch (const InternalError&) {  // fastdyn's own failure (HANDLE_TH_ERRORS makes it a RuntimeError)
    note_fastdyn_failure(graph_calls());
    throw;
  } catch (const BackendError&) {
    note_fastdyn_failure(graph_calls());
    throw;
  }
  std::vector<PyObject*> wrapped(outputs.size(), nullptr);
  PyObject* result = build(self->out, outputs, wrapped);
  for (PyObject* w : wrapped) Py_XDECREF(w);
  return result;
  END_HANDLE_TH_ERRORS
}

PyObject* compiled_graph_call(PyObject* self_obj, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  const uint64_t call = begin_graph_call();
  PyObject* result = compiled_graph_run(self_obj, args, nargsf, kwnames);
  if (!result) note_failed_graph_call(call);
  return result;
}

void compiled_graph_dealloc(PyObject* self_obj) {
  auto* self = reinterpret_cast<CompiledGraphObject*>(self_obj);
  self->exe.~ExecutablePtr();
  self->out.~OutputTemplate();
  self->name.~basic_string();
  Py_TYPE(self_obj)->tp_free(self_obj);
}

PyObject* compiled_graph_repr(PyObject* self_obj) {
  auto* self = reinterpret_cast<CompiledGraphObject*>(self_obj);
  return PyUnicode_FromFormat("<fastdyn compiled graph %s>", self->name.c_str());
}

PyTypeObject* compiled_graph_type() {
  static PyTypeObject type = [] {
    PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
    t.tp_name = "fastdyn.CompiledGraph";
    t.tp_basicsize = sizeof(CompiledGraphObject);
    t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
    t.tp_vectorcall_offset = offsetof(CompiledGraphObject, vectorcall);
    t.tp_call = PyVectorcall_Call;
    t.tp_dealloc = compiled_graph_dealloc;
    t.tp_repr = compiled_graph_repr;
    return t;
  }();
  static bool ready = [] { return PyType_Ready(&type) == 0; }();
  FD_CHECK(ready, "PyType_Ready(fastdyn.CompiledGraph) failed");
  return &type;
}

}  // namespace

PyObject* make_compiled_graph(ExecutablePtr exe, OutputTemplate out, std::string name) {
  PyTypeObject* type = compiled_graph_type();
  PyObject* obj = type->tp_alloc(type, 0);
  if (!obj) return nullptr;
  auto* self = reinterpret_cast<CompiledGraphObject*>(obj);
  self->vectorcall = compiled_graph_call;
  new (&self->exe) ExecutablePtr(std::move(exe));
  new (&self->out) OutputTemplate(std::move(out));
  new (&self->name) std::string(std::move(name));
  return obj;
}

bool is_compiled_graph(PyObject* obj) { return Py_TYPE(obj) == compiled_graph_type(); }

Executable* compiled_graph_executable(PyObject* obj) {
  return is_compiled_graph(obj) ? reinterpret_cast<CompiledGraphObject*>(obj)->exe.get() : nullptr;
}


void test_fail_graph_runs(int runs) { t_fail_runs = runs; }

}  // namespace fastdyn::runtime
