// pymodule/check_bindings.cpp — see check_bindings.h.
#include "pymodule/check_bindings.h"

#include <torch/csrc/autograd/python_variable.h>

#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "runtime/accuracy_check.h"

namespace py = pybind11;

namespace fastdyn::pymodule {

void bind_check(py::module_& m) {
  // NB: the mode applies to programs compiled while it is on (their check plans are built then).
  m.def("set_check", [](bool on) { runtime::set_check_enabled(on); });
  m.def("check_enabled", [] { return runtime::check_enabled(); });
  m.def("check_divergences", [] {
    py::list out;
    for (const runtime::Divergence& d : runtime::divergences()) {
      py::list inputs;
      for (const at::Tensor& t : d.inputs) inputs.append(py::reinterpret_steal<py::object>(THPVariable_Wrap(t)));
      py::dict e;
      e["id"] = d.id;
      e["label"] = d.label;
      e["kernel"] = d.kernel;
      e["value"] = d.value;
      e["dtype"] = d.dtype;
      e["max_abs_err"] = d.max_abs_err;
      e["max_rel_err"] = d.max_rel_err;
      e["atol"] = d.atol;
      e["rtol"] = d.rtol;
      e["detail"] = d.detail;
      e["graph"] = d.graph;
      e["inputs"] = inputs;
      out.append(e);
    }
    return out;
  });
  m.def("check_clear", [] { runtime::clear_divergences(); });
  m.def("checked_graphs", [] { return runtime::checked_graphs(); });
  m.def("_set_corrupt_kernel_for_testing",
        [](std::optional<std::string> name) { runtime::set_corrupt_kernel_for_testing(name.value_or("")); });
}

}  // namespace fastdyn::pymodule
