// symbolic/break_calls.cpp — see break_calls.h.
#include "symbolic/break_calls.h"

#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>

#include "runtime/tensor_check.h"

namespace fastdyn::symbolic {

namespace {

PyObject* tail_call_marker() {
  static PyObject* marker = PyObject_CallNoArgs(reinterpret_cast<PyObject*>(&PyBaseObject_Type));  // NB: kept
  return marker;
}

PyObject* tail_call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "fastdyn: a tail call takes a continuation and its list");
    return nullptr;
  }
  return PyTuple_Pack(3, tail_call_marker(), args[0], args[1]);
}

PyObject* trampoline(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "fastdyn: a trampoline takes a continuation and its list");
    return nullptr;
  }
  PyObject* fn = Py_NewRef(args[0]);
  PyObject* list = Py_NewRef(args[1]);
  for (;;) {
    PyObject* r = PyObject_CallOneArg(fn, list);
    Py_DECREF(fn);
    Py_DECREF(list);
    if (!r || !PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 3 || PyTuple_GET_ITEM(r, 0) != tail_call_marker()) return r;
    fn = Py_NewRef(PyTuple_GET_ITEM(r, 1));
    list = Py_NewRef(PyTuple_GET_ITEM(r, 2));
    Py_DECREF(r);
  }
}

// size_expr(constant, t1, d1, c1, t2, d2, c2, ...): constant + c1 * t1.size(d1) + ... (a
// size-derived int of a break state, computed from the sizes the call's tensors have).
PyObject* size_expr(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || (nargs - 1) % 3 != 0) {
    PyErr_SetString(PyExc_TypeError, "fastdyn: size_expr takes a constant and (tensor, dim, coefficient) triples");
    return nullptr;
  }
  int64_t total = PyLong_AsLongLong(args[0]);
  for (Py_ssize_t i = 1; i + 2 < nargs; i += 3) {
    if (!runtime::is_tensor_object(args[i])) {
      PyErr_SetString(PyExc_TypeError, "fastdyn: size_expr of a non-tensor");
      return nullptr;
    }
    const at::Tensor& t = THPVariable_Unpack(args[i]);
    total += PyLong_AsLongLong(args[i + 2]) * t.size(PyLong_AsLongLong(args[i + 1]));
  }
  if (PyErr_Occurred()) return nullptr;
  return PyLong_FromLongLong(total);
}

// A fast-call C function object, made once and kept for the process (as is its PyMethodDef).
PyObject* kept_function(const char* name, PyObject* (*fn)(PyObject*, PyObject* const*, Py_ssize_t), const char* doc) {
  auto* def = new PyMethodDef{name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fn)), METH_FASTCALL, doc};
  return PyCFunction_New(def, nullptr);
}

}  // namespace

PyObject* tail_call_function() {
  static PyObject* fn = kept_function("__fd_tail_call__", tail_call, "returns a continuation call for the trampoline to make");
  return fn;
}

PyObject* trampoline_function() {
  static PyObject* fn = kept_function("__fd_trampoline__", trampoline, "calls a continuation, then each one it hands on");
  return fn;
}

PyObject* size_expr_function() {
  static PyObject* fn = kept_function("__fd_size_expr__", size_expr, "a size-derived int of a graph break's state, from its tensors' sizes");
  return fn;
}

}  // namespace fastdyn::symbolic
