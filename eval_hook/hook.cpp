// eval_hook/hook.cpp — see hook.h.
#include "eval_hook/hook.h"

#include <ATen/SavedTensorHooks.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <exception>

#include "eval_hook/code_state.h"
#include "eval_hook/compiler.h"
#include "eval_hook/config.h"
#include "eval_hook/journal_events.h"
#include "eval_hook/cpython_compat.h"
#include "eval_hook/skip_rules.h"
#include "runtime/compiled_graph.h"
#include "runtime/errors.h"
#include "runtime/graph_calls.h"
#include "runtime/guards.h"
#include "runtime/journal.h"
#include "symbolic/continuation.h"

namespace fastdyn::eval_hook {
namespace {

int g_install_count = 0;
ExplainReport* g_recorder = nullptr;
EvalFrameFn g_previous = nullptr;
GraphBreakRaiser g_raise_graph_break = nullptr;

PyObject* run_previous(PyThreadState* tstate, Frame* frame, int throwflag) {
  if (g_previous) return g_previous(tstate, frame, throwflag);
  return fd_eval_default(tstate, frame, throwflag);
}

runtime::GuardFrame guard_frame(Frame* frame) {
  PyFunctionObject* fn = fd_frame_func(frame);
  runtime::GuardFrame gf;
  gf.fast_locals = fd_frame_localsplus(frame);
  gf.globals = fd_frame_globals(frame);
  gf.builtins = fd_frame_builtins(frame);
  gf.closure = fn ? fn->func_closure : nullptr;
  return gf;
}

// Saved-tensor hooks (torch.utils.checkpoint, torch.autograd.graph.save_on_cpu) see every tensor
// autograd saves, and checkpointing recomputes a forward in backward expecting the very tensors
// the first run saved, counted: a graph's ops save others than eager's ops do. While any such
// hook is set and grad is on, frames run as written (what they call is checked again).
bool saved_tensor_hooks_active() {
  return at::GradMode::is_enabled() && !at::SavedTensorDefaultHooks::get_tls_state().stack.empty();
}

// An exception leaving a transformed frame that broke has a traceback entry for that frame and,
// next, one for the continuation of the same function that raised (or passed it on): eager has
// one entry for the function, at the line where it raised. The transformed frame's entry is
// dropped (the continuation's frame has the user's code, line and locals).
void drop_own_traceback_entry(PyObject* transformed_fn) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (tb && PyTraceBack_Check(tb)) {
    auto* head = reinterpret_cast<PyTracebackObject*>(tb);
    PyTracebackObject* next = head->tb_next;
    PyCodeObject* mine = reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(transformed_fn));
    if (next && head->tb_frame && next->tb_frame) {
      PyCodeObject* head_code = PyFrame_GetCode(head->tb_frame);  // new references
      PyCodeObject* next_code = PyFrame_GetCode(next->tb_frame);
      const bool same_function = head_code == mine && next_code->co_firstlineno == mine->co_firstlineno &&
                                 PyObject_RichCompareBool(next_code->co_filename, mine->co_filename, Py_EQ) == 1 &&
                                 PyObject_RichCompareBool(next_code->co_qualname, mine->co_qualname, Py_EQ) == 1;
      Py_DECREF(head_code);
      Py_DECREF(next_code);
      if (same_function) {
        PyObject* rest = Py_NewRef(reinterpret_cast<PyObject*>(next));
        Py_DECREF(tb);
        tb = rest;
        if (value && PyExceptionInstance_Check(value)) PyException_SetTraceback(value, tb);
      }
    }
  }
  PyErr_Restore(type, value, tb);
}

// Runs a cache entry with the frame's arguments, then releases the frame.
PyObject* run_entry(PyThreadState* tstate, Frame* frame, CacheEntry& entry) {
  // NB: read before the call: a recursive miss of the same code at its recompile limit, or a
  // fastdyn.reset() inside, may destroy the entry while it runs (its function and graph stay
  // alive through the running frame).
  const bool rerun_on_error = entry.rerun_on_error;
  const bool rerun_if_graph_raised = entry.rerun_if_graph_raised;
  const bool rerun_if_untouched = entry.rerun_if_untouched;
  const uint64_t own_graph_call = runtime::graph_calls() + 1;  // its graph is the first call it makes
  const uint64_t outer_redo = runtime::redo_if_untouched(rerun_if_untouched ? own_graph_call : 0);
  PyObject** slots = fd_frame_localsplus(frame);
  PyObject* result = nullptr;
  constexpr size_t kMaxDirect = 16;
  if (entry.direct && entry.direct_slots.size() <= kMaxDirect) {
    PyObject* args[kMaxDirect];
    for (size_t i = 0; i < entry.direct_slots.size(); ++i) args[i] = slots[entry.direct_slots[i]];
    PyObject* graph = Py_NewRef(entry.graph);
    result = PyObject_Vectorcall(graph, args, entry.direct_slots.size(), nullptr);
    Py_DECREF(graph);
  } else {
    // Functions made by one `def` share code but not closures: a frame with a closure runs the
    // transformed code through a function of its own, holding that closure. (Setting the shared
    // entry function's closure for the call raced: another thread could switch it before this
    // frame's COPY_FREE_VARS read it, and the entry kept the last closure, and what its cells
    // held, alive.)
    PyFunctionObject* fn = fd_frame_func(frame);
    PyObject* callee = nullptr;
    if (fn && fn->func_closure) {
      auto* shared = reinterpret_cast<PyFunctionObject*>(entry.fn);
      callee = PyFunction_NewWithQualName(shared->func_code, shared->func_globals, shared->func_qualname);
      if (callee && PyFunction_SetClosure(callee, fn->func_closure) < 0) Py_CLEAR(callee);
    } else {
      callee = Py_NewRef(entry.fn);
    }
    if (callee) {
      result = PyObject_Vectorcall(callee, slots, static_cast<size_t>(entry.nargs), nullptr);
      Py_DECREF(callee);
    }
  }
  runtime::redo_if_untouched(outer_redo);
  if (!result && runtime::fastdyn_failed_call() == own_graph_call) {
    // The graph failed with fastdyn's own error (a compiler bug): the redo below still gives the
    // user eager's behaviour, but it is counted, logged, and in strict mode (the test suite)
    // raised rather than hidden.
    backend_failures()++;
    if (config().strict) {
      fd_frame_release(tstate, frame);
      return nullptr;
    }
    if (config().log_code) log_event("code", "a compiled graph failed with fastdyn's own error; the frame is redone eagerly");
  }
  if (!result && (rerun_on_error || (rerun_if_graph_raised && runtime::failed_graph_call() == own_graph_call) ||
                  (rerun_if_untouched && runtime::failed_untouched_call() == own_graph_call))) {
    // The graph raised (an index out of range, say). It had no side effects, and the frame is
    // untouched: run it eagerly so the user sees exactly eager's exception and traceback (and
    // eager's side effects before it: a global or attribute the frame writes first).
    PyErr_Clear();
    return run_previous(tstate, frame, 0);
  }
  if (!result) drop_own_traceback_entry(entry.fn);
  fd_frame_release(tstate, frame);
  return result;
}

// The guard of the newest entry that this frame fails: why it recompiles (or misses at the limit).
std::string failed_guard(const CodeState& st, Frame* frame) {
  if (st.entries.empty()) return "";
  ModeGuard off(Request{});  // describing a guard may run a user __repr__
  runtime::GuardFailure failure;
  st.entries.front()->guards->check(guard_frame(frame), &failure);
  return failure.description;
}

void report_break(const CompileOutcome& out, PyCodeObject* code) {
  if (out.counts_as_graph_break()) {
    stats().graph_breaks++;
    journal_events::graph_break(code, out);
  }
  if (config().log_graph_breaks) {
    const char* name = PyUnicode_AsUTF8(code->co_qualname);
    log_event("graph_break", std::string(name ? name : "?") + " at " + out.filename + ":" +
                                 std::to_string(out.lineno) + ": " + out.reason +
                                 (out.broke && out.graph_ops == 0 ? " (nothing recorded before it: no graph break; a continuation runs the rest)"
                                  : out.broke ? " (a continuation runs the rest)"
                                  : out.raises ? " (the frame raises here: it runs as written, no graph break)"
                                               : " (the frame runs eagerly)"));
  }
}

// Compile-on-miss. Returns the new entry (owned by the code state), or nullptr to run eagerly.
// Sets *raise when fullgraph=True and capture failed (a Python exception is then set).
CacheEntry* compile_miss(Frame* frame, CodeState* st, Request request, bool* raise) {
  const bool fullgraph = request.fullgraph;
  PyCodeObject* code = fd_frame_code(frame);
  PyFunctionObject* fn = fd_frame_func(frame);
  symbolic::FrameInputs fi;
  fi.code = code;
  fi.localsplus = fd_frame_localsplus(frame);
  fi.globals = fd_frame_globals(frame);
  fi.builtins = fd_frame_builtins(frame);
  fi.closure = fn ? fn->func_closure : nullptr;
  fi.dynamic = request.dynamic;
  fi.shapes = symbolic::resume_shape_history(code);  // a continuation's: its resume point's
  if (!fi.shapes) fi.shapes = &st->shapes;

  CompileOutcome out;
  const bool journal = runtime::journal::on();
  const int32_t journal_graph = journal ? runtime::journal::new_graph() : -1;
  if (journal && st->compiles > 0) journal_events::recompile(code, st->compiles, failed_guard(*st, frame));
  const double start_ms = journal ? runtime::journal::now_ms() : 0.0;
  {
    ModeGuard off(Request{});  // no re-entrance while compiling
    runtime::journal::Scope scope(journal_graph);  // what the layers below record is this graph's
    try {
      out = compile_frame(fi, request.target);
    } catch (const std::exception& e) {
      // A fastdyn bug: warn once per code object and run eagerly for good (strict mode: raise).
      PyErr_Clear();
      const char* name = PyUnicode_AsUTF8(code->co_qualname);
      if (config().strict) {
        PyErr_Format(PyExc_RuntimeError, "fastdyn strict mode: compiling %s failed: %s", name ? name : "?", e.what());
        *raise = true;
        return nullptr;
      }
      log_event("internal_error", std::string(name ? name : "?") + ": " + e.what() + " (running eagerly)");
      mark_eager(code);
      return nullptr;
    }
  }
  if (g_recorder) {
    ModeGuard off(Request{});  // describing guards may run user __repr__
    record_outcome(*g_recorder, out);
  }
  if (out.broke) {
    report_break(out, code);
    if (fullgraph && g_raise_graph_break) {
      g_raise_graph_break(out.reason, out.filename, out.lineno);
      *raise = true;
      return nullptr;
    }
  }
  switch (out.kind) {
    case CompileOutcome::Kind::Compiled: {
      if (journal)
        journal_events::entry(code, st->compiles, out, request.target.backend, journal_graph, start_ms,
                              runtime::journal::now_ms() - start_ms);
      stats().frames_compiled++;
      if (out.graph_ops > 0) stats().graphs++;
      if (st->compiles > 0) {
        stats().recompiles++;
        if (config().log_recompiles) {
          const char* name = PyUnicode_AsUTF8(code->co_qualname);
          log_event("recompile", std::string(name ? name : "?") + " (entry " + std::to_string(st->compiles + 1) + ")");
        }
      }
      st->compiles++;
      out.entry->target = request.target;
      out.entry->dynamic = request.dynamic;
      st->entries.insert(st->entries.begin(), std::move(out.entry));
      return st->entries.front().get();
    }
    case CompileOutcome::Kind::NoTensors:
      if (st->entries.empty()) mark_eager(code);
      return nullptr;
    case CompileOutcome::Kind::Unsupported:
      report_break(out, code);
      if (fullgraph && g_raise_graph_break) {
        g_raise_graph_break(out.reason, out.filename, out.lineno);
        *raise = true;
        return nullptr;
      }
      // A failed recompile counts toward the bound (no retrace per call), and so does a trace
      // that met state the program is still building (it is traced again at the next call).
      if (st->entries.empty() && !out.retry_later && !out.raises) mark_eager(code);
      else st->compiles++;
      return nullptr;
  }
  return nullptr;
}

// Once per code object that reaches the limit: a Python warning naming the function and the
// guard of its newest entry that this call failed (what kept changing: a size, a value...). The
// warning never changes what the program does: with warnings turned into errors it is printed.
void warn_recompile_limit(PyCodeObject* code, const CodeState& st, Frame* frame, int limit) {
  const char* name = PyUnicode_AsUTF8(code->co_qualname);
  // Off for this thread: describing a guard may run a user __repr__, and the warnings machinery
  // (a user's showwarning) runs as written.
  ModeGuard off(Request{});
  std::string why = failed_guard(st, frame);
  if (why.empty()) why = "a guard failed";
  const std::string msg = std::string("fastdyn: ") + (name ? name : "?") + " reached the recompile limit (" +
                          std::to_string(limit) + " entries); calls that match none run eagerly. "
                          "The guard that failed: " + why + ". Raise the limit with fastdyn.set_recompile_limit(n) "
                          "or FASTDYN_RECOMPILE_LIMIT.";
  journal_events::recompile_limit(code, msg);
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  if (PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 1) < 0) {
    PyErr_Clear();
    log_event("recompile_limit", msg);
  }
  PyErr_Restore(type, value, tb);
}

// Entries kept by a continuation that resumes inside a loop body (see fastdyn_eval_frame).
constexpr int kLoopResumeEntries = 3;

PyObject* fastdyn_eval_frame(PyThreadState* tstate, Frame* frame, int throwflag) {
  const Request request = current_request();  // a copy: compiling overrides the thread's
  const Mode mode = request.mode;
  const bool fullgraph = request.fullgraph;
  if (mode == Mode::Off || throwflag) return run_previous(tstate, frame, throwflag);
  PyCodeObject* code = fd_frame_code(frame);
  CodeState* st = code_state(code);
  if (st == skip_marker() || (st && st->eager && !fullgraph)) return run_previous(tstate, frame, throwflag);
  if (!st) {
    if (should_skip(code)) {
      mark_skip(code);
      return run_previous(tstate, frame, throwflag);
    }
  }
  if (!fd_frame_is_fresh(frame) || fd_thread_is_tracing(tstate)) return run_previous(tstate, frame, throwflag);
  // Likewise under a TorchFunctionMode or TorchDispatchMode: it must see every op.
  if (saved_tensor_hooks_active() || runtime::python_mode_active()) return run_previous(tstate, frame, throwflag);
  // Another PEP 523 user (torch.compile's Dynamo) installed its evaluator over ours and calls us
  // for the frames it leaves: they run as written, so it never meets fastdyn's rewritten code.
  // (After the skip checks: skipped frames run as written anyway.)
  if (fd_get_eval_frame(tstate) != fastdyn_eval_frame) return run_previous(tstate, frame, throwflag);
  if (st && st->skip_left > 0) {  // at the limit, in a span of calls that check no entry
    --st->skip_left;
    return run_previous(tstate, frame, throwflag);
  }
  stats().frames_seen++;
  if (st) {
    const runtime::GuardFrame gf = guard_frame(frame);
    auto& entries = st->entries;
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i]->target == request.target && entries[i]->dynamic == request.dynamic && entries[i]->guards->check(gf)) {
        if (fullgraph && entries[i]->broke && g_raise_graph_break) {
          g_raise_graph_break(entries[i]->break_reason, entries[i]->break_file, entries[i]->break_line);
          fd_frame_release(tstate, frame);
          return nullptr;
        }
        stats().cache_hits++;
        st->misses_at_limit = st->skip_span = 0;
        if (i > 0) std::rotate(entries.begin(), entries.begin() + static_cast<long>(i), entries.begin() + static_cast<long>(i) + 1);
        return run_entry(tstate, frame, *entries.front());
      }
    }
    if (config().log_recompiles && !entries.empty()) {
      runtime::GuardFailure why;
      entries.front()->guards->check(gf, &why);
      const char* name = PyUnicode_AsUTF8(code->co_qualname);
      log_event("guard_miss", std::string(name ? name : "?") + ": " + why.description);
    }
  }
  stats().cache_misses++;
  if (mode != Mode::Compile) return run_previous(tstate, frame, throwflag);
  st = ensure_code_state(code);
  st->eager = false;  // fullgraph retraces a frame that ran eagerly, to raise its break
  // A continuation that resumes inside a loop body runs once per iteration: a value the loop
  // changes at every iteration (a counter) would make an entry each time. It keeps a few, and
  // past them the rest of such a loop runs as written (its calls compiled), quietly.
  const bool loop_resume = symbolic::resumes_inside_loop(code);
  const int limit = loop_resume ? std::min(config().recompile_limit, kLoopResumeEntries) : config().recompile_limit;
  if (st->compiles >= limit) {
    // At the limit a miss runs eagerly; the entries stay in use for the calls they match.
    // Warned unasked only for code that compiled a graph: library code recompiling on fresh
    // objects (dataclass __init__s, sympy while torch imports it) is not the user's concern,
    // and FASTDYN_LOG=recompiles shows it all.
    auto has_graph = [&] {
      return std::any_of(st->entries.begin(), st->entries.end(),
                         [](const std::unique_ptr<CacheEntry>& e) { return e->graph != nullptr; });
    };
    if (!st->limit_logged && (config().log_recompiles || (has_graph() && !loop_resume))) {
      st->limit_logged = true;
      warn_recompile_limit(code, *st, frame, limit);
    }
    if (++st->misses_at_limit >= limit) {
      st->misses_at_limit = 0;
      st->skip_span = std::min(st->skip_span ? 2 * st->skip_span : limit, 64);
      st->skip_left = st->skip_span;
    }
    return run_previous(tstate, frame, throwflag);
  }
  bool raise = false;
  CacheEntry* entry = compile_miss(frame, st, request, &raise);
  if (raise) {
    fd_frame_release(tstate, frame);
    return nullptr;
  }
  if (!entry) return run_previous(tstate, frame, throwflag);
  return run_entry(tstate, frame, *entry);
}

}  // namespace

void reassert() {
  if (g_install_count == 0) return;
  PyThreadState* tstate = PyThreadState_Get();
  // NB: torch.compile's Dynamo, on leaving a compiled region, puts back the evaluator it found
  // on entering, which is the default one when fastdyn was installed inside the region (by a
  // backend that calls fastdyn.jit). Another evaluator over ours is left alone: it calls ours.
  if (!fd_is_default_eval(fd_get_eval_frame(tstate))) return;
  g_previous = nullptr;
  fd_set_eval_frame(tstate, fastdyn_eval_frame);
}

void install() {
  if (g_install_count++ > 0) return reassert();
  PyThreadState* tstate = PyThreadState_Get();
  init_code_extra();
  g_previous = fd_get_eval_frame(tstate);
  if (fd_is_default_eval(g_previous) || g_previous == fastdyn_eval_frame) g_previous = nullptr;
  fd_set_eval_frame(tstate, fastdyn_eval_frame);
}

void uninstall() {
  if (g_install_count == 0 || --g_install_count > 0) return;
  PyThreadState* tstate = PyThreadState_Get();
  fd_set_eval_frame(tstate, g_previous ? g_previous : fd_eval_default);
  g_previous = nullptr;
}

bool installed() {
  return g_install_count > 0 && fd_get_eval_frame(PyThreadState_Get()) == fastdyn_eval_frame;
}

void set_graph_break_raiser(GraphBreakRaiser fn) { g_raise_graph_break = fn; }

void set_explain_recorder(ExplainReport* r) { g_recorder = r; }
bool explain_recording() { return g_recorder != nullptr; }

}  // namespace fastdyn::eval_hook
