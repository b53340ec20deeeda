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

}  // namespace

PyObject* resolve_loaded_python_name(const std::string& dotted) {
  std::string mod = dotted;
  while (true) {
    const size_t dot = mod.rfind('.');
    if (dot == std::string::npos) return nullptr;
    mod = mod.substr(0, dot);
    PyObject* name = PyUnicode_FromString(mod.c_str());
    PyObject* m = PyImport_GetModule(name);
    Py_DECREF(name);
    if (m) {
      Py_DECREF(m);
      return resolve_python_name(dotted);
    }
    PyErr_Clear();
  }
}

PyObject* resolve_python_name(const std::string& dotted) {
  std::string mod = dotted;
  PyObject* obj = nullptr;
  size_t consumed = 0;
  while (true) {
    size_t dot = mod.rfind('.');
    if (dot == std::string::npos) break;
    mod = mod.substr(0, dot);
    obj = PyImport_ImportModule(mod.c_str());
    if (obj) { consumed = mod.size(); break; }
    PyErr_Clear();
  }
  if (!obj) return nullptr;
  std::string rest = dotted.substr(consumed + 1);
  size_t pos = 0;
  while (obj && pos <= rest.size()) {
    size_t dot = rest.find('.', pos);
    std::string part = rest.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    PyObject* next = PyObject_GetAttrString(obj, part.c_str());
    Py_DECREF(obj);
    obj = next;
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  if (!obj) PyErr_Clear();
  return obj;
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
