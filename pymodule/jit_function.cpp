// pymodule/jit_function.cpp — see jit_function.h.
#include "pymodule/jit_function.h"

#include <cstddef>

#include "eval_hook/config.h"
#include "eval_hook/hook.h"

namespace fastdyn::pymodule {
namespace {

struct JitFunctionObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* fn;     // strong
  PyObject* dict;   // strong: __wrapped__, __name__... (functools.update_wrapper writes here)
  eval_hook::Request request;  // Compile, with this wrapper's fullgraph and backend
};

PyObject* jit_call(PyObject* self_obj, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<JitFunctionObject*>(self_obj);
  eval_hook::reassert();
  eval_hook::ModeGuard on(self->request);
  return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
}

void jit_dealloc(PyObject* self_obj) {
  auto* self = reinterpret_cast<JitFunctionObject*>(self_obj);
  PyObject_GC_UnTrack(self_obj);
  Py_CLEAR(self->fn);
  Py_CLEAR(self->dict);
  eval_hook::uninstall();
  Py_TYPE(self_obj)->tp_free(self_obj);
}

int jit_traverse(PyObject* self_obj, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<JitFunctionObject*>(self_obj);
  Py_VISIT(self->fn);
  Py_VISIT(self->dict);
  return 0;
}

int jit_clear(PyObject* self_obj) {
  auto* self = reinterpret_cast<JitFunctionObject*>(self_obj);
  Py_CLEAR(self->fn);
  Py_CLEAR(self->dict);
  return 0;
}

// Binding as a method: fastdyn.jit on a function stored in a class.
PyObject* jit_descr_get(PyObject* self, PyObject* obj, PyObject*) {
  if (!obj || obj == Py_None) return Py_NewRef(self);
  return PyMethod_New(self, obj);
}

PyObject* jit_repr(PyObject* self_obj) {
  auto* self = reinterpret_cast<JitFunctionObject*>(self_obj);
  return PyUnicode_FromFormat("<fastdyn.jit of %R>", self->fn);
}

// __dict__ itself, so that functools.update_wrapper can fill it (and set __wrapped__, which
// inspect.signature follows: transformers' generate() reads the signature of a jit-wrapped forward).
PyGetSetDef jit_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject* jit_type() {
  static PyTypeObject type = [] {
    PyTypeObject t{PyVarObject_HEAD_INIT(nullptr, 0)};
    t.tp_name = "fastdyn.JitFunction";
    t.tp_basicsize = sizeof(JitFunctionObject);
    t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_METHOD_DESCRIPTOR;
    t.tp_vectorcall_offset = offsetof(JitFunctionObject, vectorcall);
    t.tp_dictoffset = offsetof(JitFunctionObject, dict);
    t.tp_call = PyVectorcall_Call;
    t.tp_dealloc = jit_dealloc;
    t.tp_traverse = jit_traverse;
    t.tp_clear = jit_clear;
    t.tp_descr_get = jit_descr_get;
    t.tp_repr = jit_repr;
    t.tp_getattro = PyObject_GenericGetAttr;
    t.tp_setattro = PyObject_GenericSetAttr;
    t.tp_getset = jit_getset;
    return t;
  }();
  static bool ready = PyType_Ready(&type) == 0;
  (void)ready;
  return &type;
}

}  // namespace

PyObject* make_jit_function(PyObject* fn, const eval_hook::Request& request) {
  PyTypeObject* type = jit_type();
  auto* self = PyObject_GC_New(JitFunctionObject, type);
  if (!self) return nullptr;
  self->vectorcall = jit_call;
  self->fn = Py_NewRef(fn);
  self->dict = nullptr;
  self->request = request;
  eval_hook::install();
  PyObject_GC_Track(reinterpret_cast<PyObject*>(self));
  return reinterpret_cast<PyObject*>(self);
}

PyObject* jit_function_target(PyObject* obj) {
  if (Py_TYPE(obj) != jit_type()) return nullptr;
  return reinterpret_cast<JitFunctionObject*>(obj)->fn;
}

}  // namespace fastdyn::pymodule
