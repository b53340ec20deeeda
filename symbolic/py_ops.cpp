// symbolic/py_ops.cpp — name -> object resolution of families.def (see py_ops.h).
#include "symbolic/py_ops.h"

#include <unordered_map>

namespace fastdyn::symbolic {
namespace {

struct Tables {
  std::unordered_map<PyObject*, Family> by_object;  // strong refs held for the process
  std::unordered_map<std::string, Family> by_tensor_attr;
  std::unordered_map<std::string, Family> by_name;
};

// New reference to the module `name` if it is in sys.modules, else nullptr (no exception set).
PyObject* loaded_module(const std::string& name) {
  PyObject* key = PyUnicode_FromString(name.c_str());
  PyObject* m = key ? PyImport_GetModule(key) : nullptr;
  Py_XDECREF(key);
  if (!m) PyErr_Clear();
  return m;
}

// obj.a.b.c for rest = "a.b.c"; steals `obj`. New reference, or nullptr with no exception set.
PyObject* walk_attributes(PyObject* obj, const std::string& rest) {
  size_t pos = 0;
  while (obj && pos <= rest.size()) {
    const size_t dot = rest.find('.', pos);
    const std::string part = rest.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    PyObject* next = PyObject_GetAttrString(obj, part.c_str());
    Py_DECREF(obj);
    obj = next;
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  if (!obj) PyErr_Clear();
  return obj;
}

}  // namespace

PyTypeObject* defaultdict_type() {
  static PyObject* t = resolve_python_name("collections.defaultdict");  // NB: kept for the process
  return reinterpret_cast<PyTypeObject*>(t);
}

PyObject* resolve_python_name(const std::string& dotted) {
  // NB: the longest prefix already in sys.modules first: a failed import ("torch.Tensor" as a
  // module) searches the package's path, and the op table resolves hundreds of such names.
  for (size_t dot = dotted.rfind('.'); dot != std::string::npos && dot > 0; dot = dotted.rfind('.', dot - 1)) {
    if (PyObject* m = loaded_module(dotted.substr(0, dot))) {
      if (PyObject* obj = walk_attributes(m, dotted.substr(dot + 1))) return obj;
      break;
    }
  }
  for (size_t dot = dotted.rfind('.'); dot != std::string::npos && dot > 0; dot = dotted.rfind('.', dot - 1)) {
    if (PyObject* m = PyImport_ImportModule(dotted.substr(0, dot).c_str()))
      return walk_attributes(m, dotted.substr(dot + 1));
    PyErr_Clear();
  }
  return nullptr;
}

PyObject* dict_item(PyObject* d, std::string_view name) {
  PyObject* key = interned_name(name);
  PyObject* v = key ? PyDict_GetItemWithError(d, key) : nullptr;  // borrowed: d holds it
  if (!v) PyErr_Clear();
  Py_XDECREF(key);
  return v;
}

PyObject* resolve_loaded_python_name(const std::string& dotted) {
  // NB: the module named by everything before the last dot, not any loaded prefix: walking
  // `torch._dynamo` from a loaded `torch` goes through torch's lazy __getattr__, which imports it.
  const size_t dot = dotted.rfind('.');
  if (dot == std::string::npos || dot == 0) return nullptr;
  PyObject* m = loaded_module(dotted.substr(0, dot));
  if (!m) return nullptr;
  PyObject* v = PyObject_GetAttrString(m, dotted.c_str() + dot + 1);
  Py_DECREF(m);
  if (!v) PyErr_Clear();
  return v;
}

namespace {

const Tables& tables() {
  static const Tables* t = [] {
    auto* tb = new Tables();  // NB: leaked on purpose: holds Python objects for the process
    for (int f = 0; f < static_cast<int>(Family::kCount); ++f) {
      const Family fam = static_cast<Family>(f);
      for (const char* name : codegen::family_python_names(fam)) {
        std::string n = name;
        tb->by_name.emplace(n, fam);
        if (n.rfind("Tensor.", 0) == 0) {
          tb->by_tensor_attr.emplace(n.substr(7), fam);
          n = "torch." + n;  // torch.Tensor.add, for explicit unbound calls
        }
        PyObject* obj = resolve_python_name(n);
        if (!obj) continue;
        // Properties (Tensor.T) resolve to descriptors, never called directly: harmless.
        if (!tb->by_object.emplace(obj, fam).second) Py_DECREF(obj);
      }
    }
    return tb;
  }();
  return *t;
}

}  // namespace

std::optional<Family> family_of_object(PyObject* obj) {
  const auto& m = tables().by_object;
  auto it = m.find(obj);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

std::optional<Family> family_of_tensor_attr(const std::string& name) {
  const auto& m = tables().by_tensor_attr;
  auto it = m.find(name);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

std::optional<Family> family_of_name(const std::string& python_name) {
  const auto& m = tables().by_name;
  auto it = m.find(python_name);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

}  // namespace fastdyn::symbolic
