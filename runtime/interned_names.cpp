// runtime/interned_names.cpp — see interned_names.h.
#include "runtime/interned_names.h"

#include <string>
#include <unordered_map>

namespace fastdyn::runtime {

PyObject* interned_name(std::string_view name) {
  // Keyed by views of the strs' own UTF-8 buffers, alive as long as the table holds the strs.
  static auto* table = new std::unordered_map<std::string_view, PyObject*>();  // NB: kept for the process
  if (auto it = table->find(name); it != table->end()) return Py_NewRef(it->second);
  if (table->size() >= 8192) {
    std::unordered_map<std::string_view, PyObject*> old;
    old.swap(*table);
    for (auto& kv : old) Py_DECREF(kv.second);  // NB: after the swap: a dealloc never sees a half-cleared table
  }
  PyObject* s = PyUnicode_InternFromString(std::string(name).c_str());
  if (!s) {
    PyErr_Clear();
    return nullptr;
  }
  table->emplace(std::string_view(PyUnicode_AsUTF8(s)), Py_NewRef(s));
  return s;
}

}  // namespace fastdyn::runtime
