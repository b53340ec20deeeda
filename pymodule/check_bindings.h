// pymodule/check_bindings.h — fastdyn._C's accuracy-mode functions (runtime/accuracy_check.h).
#pragma once
#include <pybind11/pybind11.h>

namespace fastdyn::pymodule {

// Defines on m: set_check(bool), check_enabled(), check_divergences() (a list of dicts: id, label,
// kernel, value, dtype, max_abs_err, max_rel_err, atol, rtol, detail, graph, inputs), check_clear(),
// checked_graphs(), _set_corrupt_kernel_for_testing(name or None).
void bind_check(pybind11::module_& m);

}  // namespace fastdyn::pymodule
