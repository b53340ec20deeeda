// symbolic/break_calls.h — the C functions a frame's transformed code calls at a graph break
// (continuation.cpp emits calls to them as constants).
//
// A frame's transformed code ends by calling its continuation and returning its result. A break
// inside a loop resumes in the loop's body, and the continuation's own trace runs into the next
// iteration and breaks there again: nested, the calls would grow the stack by a frame per
// iteration (RecursionError after about a thousand). So the transformed code of a continuation
// returns (marker, continuation, list) instead of calling it, and the frame that began it all
// calls it through trampoline(), which calls each continuation so returned in turn, in a loop.
// A continuation is only ever called by transformed code, so such a tuple never leaves the
// trampoline; one that runs as written returns its real result.
#pragma once
#include <Python.h>

namespace fastdyn::symbolic {

// __fd_trampoline__(continuation, list): calls it, then each continuation it hands on.
PyObject* trampoline_function();
// __fd_tail_call__(continuation, list): what a continuation's transformed code returns instead
// of calling its own continuation.
PyObject* tail_call_function();
// __fd_size_expr__(constant, t1, d1, c1, ...): constant + c1 * t1.size(d1) + ...: a size-derived
// int of a break's state, computed from its tensors' sizes instead of specialising them.
PyObject* size_expr_function();

}  // namespace fastdyn::symbolic
