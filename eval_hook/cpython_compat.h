// eval_hook/cpython_compat.h — the ONE place that touches CPython internals or tests the
// Python version. Everything else in fastdyn uses these accessors.
//
// Supported: CPython 3.11 and 3.12. Frame ownership differs: in 3.11 _PyEval_Vector clears and
// pops the frame after the eval function returns; in 3.12 the eval function (the callee) must
// clear and pop it. fd_frame_release() hides that difference: call it exactly once for a frame
// the hook handled without running the default evaluator on it.
#pragma once
#include <Python.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030D0000
#error "fastdyn supports CPython 3.11 and 3.12 only"
#endif

#define Py_BUILD_CORE
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

namespace fastdyn::eval_hook {

using Frame = _PyInterpreterFrame;

inline PyCodeObject* fd_frame_code(Frame* f) { return f->f_code; }
inline PyFunctionObject* fd_frame_func(Frame* f) {
#if PY_VERSION_HEX >= 0x030C0000
  return reinterpret_cast<PyFunctionObject*>(f->f_funcobj);
#else
  return f->f_func;
#endif
}
inline PyObject* fd_frame_globals(Frame* f) { return f->f_globals; }
inline PyObject* fd_frame_builtins(Frame* f) { return f->f_builtins; }
inline PyObject** fd_frame_localsplus(Frame* f) { return f->localsplus; }
// True if the frame was created for a fresh call and has not executed an instruction yet, and
// nothing (a tracer, sys._getframe) has materialised a frame object for it.
inline bool fd_frame_is_fresh(Frame* f) {
  return f->prev_instr == _PyCode_CODE(f->f_code) - 1 && f->frame_obj == nullptr &&
         f->owner == FRAME_OWNED_BY_THREAD;
}
// True while a trace function (a debugger, coverage) is set or running: such frames must run
// as written, line by line.
inline bool fd_thread_is_tracing(PyThreadState* tstate) {
#if PY_VERSION_HEX >= 0x030C0000
  return tstate->tracing > 0 || tstate->c_tracefunc != nullptr;
#else
  return tstate->cframe->use_tracing != 0 || tstate->c_tracefunc != nullptr;
#endif
}

// A code object's extra slots (co_extra). The block's layout is private to
// Objects/codeobject.c (the same in 3.11 and 3.12), so code_state.cpp checks it once against
// _PyCode_GetExtra before the hook reads slots through it; reading directly saves the hook a
// call into libpython per frame.
struct FdCodeExtra {
  Py_ssize_t size;
  void* slots[1];
};
inline void* fd_code_extra(PyCodeObject* code, Py_ssize_t index) {
  const auto* extra = static_cast<const FdCodeExtra*>(code->co_extra);
  return extra && index < extra->size ? extra->slots[index] : nullptr;
}

// Releases a fresh frame that the hook did not evaluate (see the header comment).
void fd_frame_release(PyThreadState* tstate, Frame* f);

using EvalFrameFn = _PyFrameEvalFunction;
inline EvalFrameFn fd_get_eval_frame(PyThreadState* tstate) {
  return _PyInterpreterState_GetEvalFrameFunc(tstate->interp);
}
inline void fd_set_eval_frame(PyThreadState* tstate, EvalFrameFn fn) {
  _PyInterpreterState_SetEvalFrameFunc(tstate->interp, fn);
}
inline PyObject* fd_eval_default(PyThreadState* tstate, Frame* f, int throwflag) {
  return _PyEval_EvalFrameDefault(tstate, f, throwflag);
}
// Whether `fn` (as fd_get_eval_frame returns it) is CPython's own evaluator: no PEP 523 user.
inline bool fd_is_default_eval(EvalFrameFn fn) {
  return fn == fd_eval_default || fn == reinterpret_cast<EvalFrameFn>(&_PyEval_EvalFrameDefault);
}

}  // namespace fastdyn::eval_hook
