// eval_hook/code_state.h — what fastdyn keeps per code object, in its co_extra slot.
//
// The slot holds nullptr (not seen yet), kSkip (run by the default evaluator, forever: the
// cost of a skipped frame is one pointer read), or a CodeState with its cache entries, most
// recently hit first. The CodeState is freed when the code object dies.
#pragma once
#include <Python.h>

#include <memory>
#include <string>
#include <vector>

#include "codegen/backends/backend_id.h"
#include "eval_hook/config.h"
#include "eval_hook/cpython_compat.h"
#include "runtime/guards.h"
#include "symbolic/interpreter.h"

namespace fastdyn::eval_hook {

struct CacheEntry {
  std::unique_ptr<runtime::GuardTree> guards;
  PyObject* fn = nullptr;     // strong: function object running the transformed code
  PyObject* graph = nullptr;  // strong: the compiled graph it calls
  int nargs = 0;              // argument slots passed to fn
  // The target requested when it compiled: it serves calls that request the same one only
  // (jit(f, backend="aten") next to jit(g) leaves g's entries native; likewise mode=).
  Target target;
  // Likewise the sizes it was asked to keep static or make symbols (jit(..., dynamic=)): a
  // jit(f, dynamic=False) next to jit(f) gets static entries of its own, not the other's symbolic one.
  symbolic::DynamicMode dynamic = symbolic::DynamicMode::Auto;
  bool rerun_on_error = true; // no write into an input, no random op (compiler.cpp redo_after_failure): a failed run can be redone eagerly
  // Transformed code that goes on after its graph (effects, a break's continuation): a failure
  // of its own graph, the first thing it runs, left nothing behind (no write into an input, no random op),
  // so the frame is redone eagerly; a failure later on is the user code's own.
  bool rerun_if_graph_raised = false;
  // Its graph writes into an input and draws no random number: a failure of its own graph before
  // the writes (runtime::redo_if_untouched) left nothing behind either, and the frame is redone.
  bool rerun_if_untouched = false;
  // When every graph input is an argument slot, the hit path calls `graph` with those slots
  // directly: the same work as running `fn`'s bytecode (load the slots, one call), minus a frame.
  std::vector<int> direct_slots;
  bool direct = false;
  std::string graph_text;     // for explain/logging
  std::vector<std::string> input_sources;  // explain: where each graph input is read from (L['x'])
  std::string code_text;      // what the backend made of it (kernels, extern calls): explain
  // A graph break inside: fullgraph=True callers must get GraphBreakError instead of running it.
  bool broke = false;
  std::string break_reason, break_file;
  int break_line = -1;
  ~CacheEntry();
};

struct CodeState {
  std::vector<std::unique_ptr<CacheEntry>> entries;  // most recently hit first
  int compiles = 0;
  bool limit_logged = false;  // the recompile-limit warning was given
  // At the recompile limit, entries whose guards no longer hold for any call (identity guards
  // on an object made anew per call: transformers' DynamicCache) would be checked, all of them,
  // on every call for nothing (0.81x eager on OPT). After `recompile_limit` misses in a row
  // there, the next `skip_left` calls run eagerly without checking, a span that doubles with
  // each further streak up to 64; the calls between spans still check, and a hit ends it all.
  // The entries stay: nothing runs eagerly for good.
  int misses_at_limit = 0;
  int skip_span = 0;
  int skip_left = 0;
  bool eager = false;  // learned: capture failed or found no tensor op; forgotten by reset()
  symbolic::ShapeHistory shapes;  // sizes its traces saw: automatic dynamic (symbolic/interpreter.h)
};

namespace detail {
extern CodeState g_skip;
extern Py_ssize_t g_extra_index;  // requested once, at import
extern bool g_extra_direct;       // fd_code_extra's layout matched _PyCode_GetExtra at import
CodeState* code_state_via_api(PyCodeObject* code);
}  // namespace detail

// Sentinel stored in co_extra for skipped code.
inline CodeState* skip_marker() { return &detail::g_skip; }

// Borrowed; nullptr if never seen. Inline: the hook reads it for every frame.
inline CodeState* code_state(PyCodeObject* code) {
  if (detail::g_extra_direct) return static_cast<CodeState*>(fd_code_extra(code, detail::g_extra_index));
  return detail::code_state_via_api(code);
}
// Whether code_state() reads co_extra directly (the layout probe passed at import).
inline bool code_state_reads_directly() { return detail::g_extra_direct; }
void set_code_state(PyCodeObject* code, CodeState* state);  // takes ownership (or kSkip)
void mark_skip(PyCodeObject* code);   // for good: skip rules, fastdyn.skip, transformed code
void mark_eager(PyCodeObject* code);  // until reset(): run by the default evaluator
CodeState* ensure_code_state(PyCodeObject* code);
void init_code_extra();  // once, at module import
// Drops every cache entry of every code object seen so far (fastdyn.reset()).
void reset_all_code_states();

}  // namespace fastdyn::eval_hook
