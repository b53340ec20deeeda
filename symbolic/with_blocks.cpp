// symbolic/with_blocks.cpp — BEFORE_WITH in the trace (interpreter.cpp's handler calls it): which
// context managers a traced frame enters symbolically (torch.no_grad, enable_grad,
// set_grad_enabled, torch.autocast, contextlib.nullcontext), what their __exit__ is in the trace,
// and which managers stop the trace (one whose __exit__ may swallow an exception runs the frame as
// written; one that cannot is entered for real by a continuation).
#include <string>

#include <torch/csrc/Dtype.h>

#include "symbolic/py_ops.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {
namespace {

PyObject* grad_mode_type(const char* name) {
  return resolve_python_name(std::string("torch.autograd.grad_mode.") + name);
}

}  // namespace

void Tracer::enter_with(SymValue mgr) {
  // Any other manager's __exit__ may swallow an exception of the block, which the transformed
  // code could not then go on from: the frame runs as written.
  if (!mgr.is_constant()) throw NoBreak("'with' on " + describe(mgr) + " (its __exit__ may suppress an exception)");
  static PyObject* no_grad = grad_mode_type("no_grad");
  static PyObject* enable_grad = grad_mode_type("enable_grad");
  static PyObject* set_grad = grad_mode_type("set_grad_enabled");
  static PyObject* nullcontext = resolve_python_name("contextlib.nullcontext");
  PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(mgr.obj));
  if (type == nullcontext) {  // enters to its enter_result and exits doing nothing
    PyOwned result(PyObject_GetAttrString(mgr.obj, "enter_result"));
    if (!result.p) { PyErr_Clear(); throw Unsupported("nullcontext without enter_result"); }
    SymValue exit;
    exit.kind = SymValue::Kind::BoundMethod;
    exit.name = "__fd_null_exit__";
    exit.items.push_back(mgr);
    push(std::move(exit));
    push(Tracer::constant(result.p));
    return;
  }
  static PyObject* autocast = resolve_python_name("torch.amp.autocast_mode.autocast");
  if (type == autocast) {  // torch.autocast(device_type, dtype, enabled): the block's ops cast as eager's
    PyOwned device(PyObject_GetAttrString(mgr.obj, "device"));
    PyOwned dtype(PyObject_GetAttrString(mgr.obj, "fast_dtype"));
    PyOwned enabled(PyObject_GetAttrString(mgr.obj, "_enabled"));
    if (!device.p || !dtype.p || !enabled.p || !PyUnicode_Check(device.p) || !THPDtype_Check(dtype.p)) {
      PyErr_Clear();
      throw Unsupported("'with' on " + describe(mgr) + ": not a device type, dtype and flag");
    }
    const std::string type_name = PyUnicode_AsUTF8(device.p);
    if (type_name != "cpu" && type_name != "cuda") throw Unsupported("torch.autocast on device type " + type_name);
    runtime::AutocastState inside = ctx_.autocast;
    const c10::ScalarType fast = reinterpret_cast<THPDtype*>(dtype.p)->scalar_type;
    if (type_name == "cpu") {
      inside.cpu = enabled.p == Py_True;
      inside.cpu_dtype = fast;
    } else {
      inside.cuda = enabled.p == Py_True;
      inside.cuda_dtype = fast;
    }
    autocast_outside_.push_back(ctx_.autocast);
    ctx_.autocast = inside;
    SymValue exit;
    exit.kind = SymValue::Kind::BoundMethod;
    exit.name = "__fd_autocast_exit__";
    exit.items.push_back(mgr);
    push(std::move(exit));
    push(mgr);  // __enter__ returns the manager
    return;
  }
  bool mode;
  bool prev = ctx_.grad_enabled;
  if (type == no_grad) mode = false;
  else if (type == enable_grad) mode = true;
  else if (type == set_grad) {
    // torch.set_grad_enabled(mode) sets the mode when made (a break: made for real before the
    // continuation that enters it) and its __exit__ restores the mode it saved then: both
    // read from the object, and guarded where it comes from outside.
    PyOwned m(PyObject_GetAttrString(mgr.obj, "mode")), p(PyObject_GetAttrString(mgr.obj, "prev"));
    if (!m.p || !p.p || !PyBool_Check(m.p) || !PyBool_Check(p.p)) { PyErr_Clear(); throw Unsupported("set_grad_enabled without a bool mode and prev"); }
    if (mgr.source) {
      add_guard(child_source(mgr.source, Source::Kind::Attr, "mode"), GuardKind::Equals, m.p);
      add_guard(child_source(mgr.source, Source::Kind::Attr, "prev"), GuardKind::Equals, p.p);
    }
    mode = m.p == Py_True;
    prev = p.p == Py_True;
  } else if (exit_never_suppresses(mgr.obj)) {
    throw Unsupported("'with' on " + describe(mgr) + " (entered for real: the continuation resumes inside the block)");
  } else {
    throw NoBreak("'with' on " + describe(mgr) + " (only grad-mode, autocast and nullcontext blocks are traced; its __exit__ may suppress an exception)");
  }
  SymValue exit = Tracer::grad_exit(mgr, prev, mode);
  set_grad_mode(mode);
  push(std::move(exit));
  push(Tracer::constant(Py_None));  // what __enter__ returned
}

}  // namespace fastdyn::symbolic
