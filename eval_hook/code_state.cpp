// eval_hook/code_state.cpp — co_extra storage (see code_state.h).
#include "eval_hook/code_state.h"

#include <unordered_map>
#include <unordered_set>

#include "runtime/errors.h"
#include "symbolic/continuation.h"

namespace fastdyn::eval_hook {
namespace detail {
CodeState g_skip;
Py_ssize_t g_extra_index = -1;
bool g_extra_direct = false;
}  // namespace detail

namespace {
using detail::g_extra_index;
using detail::g_skip;
// Weak registry of code objects carrying state, so reset() can clear them.
std::unordered_set<PyCodeObject*>& registry() {
  static auto* r = new std::unordered_set<PyCodeObject*>();
  return *r;
}
std::unordered_map<CodeState*, PyCodeObject*>& owners() {
  static auto* o = new std::unordered_map<CodeState*, PyCodeObject*>();
  return *o;
}

void free_state(void* p) {
  auto* st = static_cast<CodeState*>(p);
  if (!st || st == &g_skip) return;
  auto it = owners().find(st);
  if (it != owners().end()) {
    registry().erase(it->second);
    owners().erase(it);
  }
  delete st;
}

}  // namespace

CacheEntry::~CacheEntry() {
  Py_XDECREF(fn);
  Py_XDECREF(graph);
}

namespace {

// Whether fd_code_extra reads what _PyCode_GetExtra reads, on a probe code object: before and
// after setting our slot (the block is allocated by the first set).
bool direct_extra_read_matches() {
  PyCodeObject* probe = PyCode_NewEmpty("<fastdyn>", "co_extra_probe", 0);
  if (!probe) {
    PyErr_Clear();
    return false;
  }
  auto* obj = reinterpret_cast<PyObject*>(probe);
  bool ok = fd_code_extra(probe, g_extra_index) == nullptr;
  if (ok && _PyCode_SetExtra(obj, g_extra_index, &g_skip) == 0) {
    void* via_api = nullptr;
    ok = _PyCode_GetExtra(obj, g_extra_index, &via_api) == 0 && via_api == &g_skip &&
         fd_code_extra(probe, g_extra_index) == &g_skip;
    _PyCode_SetExtra(obj, g_extra_index, nullptr);
  } else {
    ok = false;
  }
  PyErr_Clear();
  Py_DECREF(obj);
  return ok;
}

}  // namespace

CodeState* detail::code_state_via_api(PyCodeObject* code) {
  void* p = nullptr;
  _PyCode_GetExtra(reinterpret_cast<PyObject*>(code), g_extra_index, &p);
  return static_cast<CodeState*>(p);
}

void init_code_extra() {
  if (g_extra_index >= 0) return;
  g_extra_index = _PyEval_RequestCodeExtraIndex(free_state);
  FD_CHECK(g_extra_index >= 0, "no co_extra slot available");
  detail::g_extra_direct = direct_extra_read_matches();
}

void set_code_state(PyCodeObject* code, CodeState* state) {
  CodeState* old = code_state(code);
  if (old == state) return;
  // NB: _PyCode_SetExtra calls the free function (free_state) on the old value itself.
  _PyCode_SetExtra(reinterpret_cast<PyObject*>(code), g_extra_index, state);
  if (state && state != &g_skip) {
    registry().insert(code);
    owners()[state] = code;
  }
}

void mark_skip(PyCodeObject* code) { set_code_state(code, &g_skip); }

void mark_eager(PyCodeObject* code) {
  CodeState* st = ensure_code_state(code);
  st->entries.clear();
  st->eager = true;
}

CodeState* ensure_code_state(PyCodeObject* code) {
  CodeState* st = code_state(code);
  if (st && st != &g_skip) return st;
  st = new CodeState();
  set_code_state(code, st);
  return st;
}

void reset_all_code_states() {
  std::vector<PyCodeObject*> codes(registry().begin(), registry().end());
  for (PyCodeObject* c : codes) set_code_state(c, nullptr);
  symbolic::forget_resume_shape_histories();
}

}  // namespace fastdyn::eval_hook
