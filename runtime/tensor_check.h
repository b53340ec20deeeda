// runtime/tensor_check.h — "is this object a tensor?" without running user code.
//
// torch's THPVariable_Check falls back to PyObject_IsInstance, which asks a non-tensor object for
// its __class__: through the object's own __getattribute__ that is user code, observable by the
// program (a counter, a log), run at trace or guard time where eager would not run it. A tensor
// here is an instance of torch.Tensor or of a subclass by the type's MRO; objects that only claim
// to be tensors through __class__ are not.
#pragma once
#include <Python.h>

#include <torch/csrc/autograd/python_variable.h>

namespace fastdyn::runtime {

inline bool is_tensor_object(PyObject* o) {
  return THPVariableClass && (THPVariable_CheckExact(o) || PyObject_TypeCheck(o, reinterpret_cast<PyTypeObject*>(THPVariableClass)));
}

}  // namespace fastdyn::runtime
