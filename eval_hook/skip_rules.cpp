// eval_hook/skip_rules.cpp — see skip_rules.h.
#include "eval_hook/skip_rules.h"

namespace fastdyn::eval_hook {
namespace {
struct PathRules {
  std::vector<std::string> skip, keep, native_only;
};
PathRules& rules() {
  static auto* r = new PathRules();
  return *r;
}
size_t longest_match(const std::vector<std::string>& list, const std::string& f) {
  size_t best = 0;
  for (const std::string& p : list)
    if (!p.empty() && p.size() > best && f.rfind(p, 0) == 0) best = p.size();
  return best;
}
}  // namespace

void set_path_rules(std::vector<std::string> skip, std::vector<std::string> keep, std::vector<std::string> native_only) {
  rules().skip = std::move(skip);
  rules().keep = std::move(keep);
  rules().native_only = std::move(native_only);
}

bool native_only(PyCodeObject* code) {
  if (rules().native_only.empty()) return false;
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  if (!file) {
    PyErr_Clear();
    return false;
  }
  return longest_match(rules().native_only, file) > 0;
}

bool should_skip(PyCodeObject* code) {
  constexpr int kNotFunctions = CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE;
  if (code->co_flags & kNotFunctions) return true;
  if (!(code->co_flags & CO_OPTIMIZED) || !(code->co_flags & CO_NEWLOCALS)) return true;  // module/class body
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  if (!file) {
    PyErr_Clear();
    return true;
  }
  const std::string f = file;
  if (f.rfind("<frozen", 0) == 0) return true;
  const size_t skip = longest_match(rules().skip, f);
  return skip > 0 && skip > longest_match(rules().keep, f);
}

}  // namespace fastdyn::eval_hook
