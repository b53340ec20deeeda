// symbolic/py_ops.h — resolving the op table's Python entry points to objects, once.
//
// codegen/capture/families.def names every Python way to reach a tensor op ("torch.add", "Tensor.add",
// "torch.nn.functional.relu", "operator.add"). At first use these names are resolved to the
// live objects, so a trace looks a call up by identity (one hash lookup), and a tensor
// method or property by name.
#pragma once
#include <Python.h>

#include <optional>
#include <string>
#include <string_view>

#include "codegen/capture/capture.h"
#include "runtime/interned_names.h"

namespace fastdyn::symbolic {

using codegen::Family;

// `obj` borrowed. torch.add, F.relu, torch.Tensor.add (unbound), operator.add ...
std::optional<Family> family_of_object(PyObject* obj);
// "add" -> the family listing "Tensor.add" (methods and properties alike).
std::optional<Family> family_of_tensor_attr(const std::string& name);
// "operator.add", "builtins.abs" ...
std::optional<Family> family_of_name(const std::string& python_name);

// Names as interned strs (runtime/interned_names.h): a new reference per call.
using runtime::interned_name;
// d[name] (borrowed), or nullptr with no error set: PyDict_GetItemString without a new str.
PyObject* dict_item(PyObject* d, std::string_view name);

// "torch.nn.Module" -> the object: imports the longest importable prefix, then walks attributes.
// New reference, or nullptr with no exception set.
PyObject* resolve_python_name(const std::string& dotted);
// The same, but only through modules already imported (never imports; nullptr otherwise).
PyObject* resolve_loaded_python_name(const std::string& dotted);
// collections.defaultdict (kept for the process).
PyTypeObject* defaultdict_type();

}  // namespace fastdyn::symbolic
