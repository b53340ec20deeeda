// eval_hook/cpython_compat.cpp — private CPython functions fastdyn needs that the interpreter
// does not export, rewritten against the audited versions only (see cpython_compat.h).
#include "eval_hook/cpython_compat.h"

namespace fastdyn::eval_hook {

#if PY_VERSION_HEX >= 0x030C0000
namespace {

// Mirrors 3.12's static clear_thread_frame(): the frame is fresh (no frame object, nothing on
// its value stack), so clearing is dropping its local slots, locals dict, function and code.
void clear_fresh_frame(Frame* f) {
  for (int i = 0; i < f->stacktop; ++i) Py_XDECREF(f->localsplus[i]);
  f->stacktop = 0;
  Py_XDECREF(f->f_locals);
  Py_DECREF(f->f_funcobj);
  Py_DECREF(f->f_code);
}

// Mirrors 3.12's _PyThreadState_PopFrame().
void pop_frame(PyThreadState* tstate, Frame* f) {
  PyObject** base = reinterpret_cast<PyObject**>(f);
  if (base == &tstate->datastack_chunk->data[0]) {
    _PyStackChunk* chunk = tstate->datastack_chunk;
    _PyStackChunk* previous = chunk->previous;
    tstate->datastack_top = &previous->data[previous->top];
    tstate->datastack_chunk = previous;
    // NB: _PyObject_VirtualFree is not exported; the public arena allocator is what it calls.
    PyObjectArenaAllocator arena;
    PyObject_GetArenaAllocator(&arena);
    arena.free(arena.ctx, chunk, chunk->size);
    tstate->datastack_limit = reinterpret_cast<PyObject**>(reinterpret_cast<char*>(previous) + previous->size);
  } else {
    tstate->datastack_top = base;
  }
}

}  // namespace

void fd_frame_release(PyThreadState* tstate, Frame* f) {
  clear_fresh_frame(f);
  pop_frame(tstate, f);
}
#else
void fd_frame_release(PyThreadState*, Frame*) {}  // 3.11: _PyEval_Vector clears and pops
#endif

}  // namespace fastdyn::eval_hook
