// pymodule/jit_function.h — the callable returned by fastdyn.jit(fn): a native wrapper that
// turns compile mode on for this thread for the duration of the call (so fn's frame, and the
// frames it calls, are compiled) and holds the hook installed while it lives.
#pragma once
#include <Python.h>

#include "eval_hook/config.h"

namespace fastdyn::pymodule {

// New reference. `fn` borrowed. `request`: Compile, with the wrapper's fullgraph, backend and
// dynamic setting.
PyObject* make_jit_function(PyObject* fn, const eval_hook::Request& request);
// Borrowed: the wrapped callable, or nullptr if `obj` is not a jit wrapper.
PyObject* jit_function_target(PyObject* obj);

}  // namespace fastdyn::pymodule
