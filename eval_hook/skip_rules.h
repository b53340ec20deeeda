// eval_hook/skip_rules.h — which code objects are never traced: the standard library, torch,
// fastdyn itself (by file path prefix), generators and coroutines, module and class bodies.
// Functions decorated with fastdyn.skip are marked directly in their co_extra slot.
#pragma once
#include <Python.h>

#include <string>
#include <vector>

namespace fastdyn::eval_hook {

// The longest matching prefix decides: `skip` paths (stdlib, torch, fastdyn) are skipped unless
// a longer `keep` prefix (site-packages inside the stdlib tree) matches. `native_only` paths (kept
// ones) are compiled on a GPU only where the cuda backend takes their graph: a GPU graph that
// would run op by op on ATen runs as written instead.
void set_path_rules(std::vector<std::string> skip, std::vector<std::string> keep, std::vector<std::string> native_only = {});
// True if `code` must always run by the default evaluator.
bool should_skip(PyCodeObject* code);
// True if `code` lies under a `native_only` path.
bool native_only(PyCodeObject* code);

}  // namespace fastdyn::eval_hook
