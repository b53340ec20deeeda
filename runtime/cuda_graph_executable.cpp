// runtime/cuda_graph_executable.cpp — see cuda_graph_executable.h.
#include "runtime/tensor_check.h"
#include "runtime/cuda_graph_executable.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

#include "runtime/compiled_graph.h"
#include "runtime/errors.h"

namespace fastdyn::runtime {

namespace {
// Holds the GIL for a scope: big graphs run without it (compiled_graph.cpp).
struct Gil {
  PyGILState_STATE state = PyGILState_Ensure();
  ~Gil() { PyGILState_Release(state); }
};
}  // namespace

PyObject* new_cuda_graph_family(const std::string& name, int max_graphs) {
  PyObject* mod = PyImport_ImportModule("fastdyn._cuda_graphs");
  if (!mod) return nullptr;
  PyObject* family = PyObject_CallMethod(mod, "Family", "si", name.c_str(), max_graphs);
  Py_DECREF(mod);
  return family;
}

CudaGraphExecutable::CudaGraphExecutable(ExecutablePtr inner, size_t n_outputs, PyObject* family, std::string name,
                                         std::string not_capturable)
    : inner_(std::move(inner)), n_outputs_(n_outputs), family_(family), name_(std::move(name)),
      not_capturable_(std::move(not_capturable)) {
  FD_CHECK(inner_ != nullptr && family_ != nullptr, "a CUDA graph executable needs an executable and a family");
  Gil gil;  // a dynamic entry makes one per size where the graph runs, maybe without the GIL
  Py_INCREF(family_);
}

CudaGraphExecutable::~CudaGraphExecutable() {
  if (!Py_IsInitialized()) return;  // interpreter teardown: the objects go with it
  Gil gil;
  Py_XDECREF(runner_);
  Py_DECREF(family_);
}

std::vector<at::Tensor> CudaGraphExecutable::run(const std::vector<at::Tensor>& inputs) {
  Gil gil;
  if (!runner_) {
    // The runner calls the inner executable as a compiled graph returning every output.
    OutputTemplate all;
    all.kind = OutputTemplate::Kind::Tuple;
    all.items.resize(n_outputs_);
    for (size_t i = 0; i < n_outputs_; ++i) {
      all.items[i].kind = OutputTemplate::Kind::Output;
      all.items[i].output = static_cast<int>(i);
    }
    PyObject* inner = make_compiled_graph(inner_, std::move(all), name_);
    if (!inner) throw python_error();
    runner_ = PyObject_CallMethod(family_, "runner", "Os", inner, not_capturable_.c_str());
    Py_DECREF(inner);
    if (!runner_) throw python_error();
  }
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(inputs.size()));
  if (!list) throw python_error();
  for (size_t i = 0; i < inputs.size(); ++i) PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), THPVariable_Wrap(inputs[i]));
  PyObject* result = PyObject_CallFunction(runner_, "OO", list, inner_->settled() ? Py_True : Py_False);
  Py_DECREF(list);
  if (!result) throw python_error();
  std::vector<at::Tensor> outputs;
  const bool ok = PyTuple_Check(result) && static_cast<size_t>(PyTuple_GET_SIZE(result)) == n_outputs_;
  if (ok) {
    outputs.reserve(n_outputs_);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(result); ++i) {
      PyObject* o = PyTuple_GET_ITEM(result, i);
      if (!is_tensor_object(o)) break;
      outputs.push_back(THPVariable_Unpack(o));
    }
  }
  Py_DECREF(result);
  FD_CHECK(outputs.size() == n_outputs_, "the CUDA graph runner of " + name_ + " returned something else than its outputs");
  return outputs;
}

std::string CudaGraphExecutable::describe() const {
  return "mode reduce-overhead: replayed as a CUDA graph after warm-up (python/fastdyn/_cuda_graphs.py), of:\n" +
         inner_->describe();
}

}  // namespace fastdyn::runtime
