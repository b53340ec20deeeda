// runtime/interned_names.h — a name the C++ side holds as text, as Python's interned str.
//
// Guard nodes key their lookups by str, and the tracer looks up dunders, builtins, globals and
// dict items by name at every instruction that reads one: a new str per lookup
// (PyUnicode_InternFromString: a malloc, a UTF-8 decode, a hash, a lookup in the interned table)
// was a tenth of a cold GPT-2 trace. One table serves both layers.
#pragma once
#include <Python.h>

#include <string_view>

namespace fastdyn::runtime {

// `name` as an interned str: a new reference, or nullptr (out of memory; no error left set).
// GIL held. The table is bounded (dict keys are names here too): past its bound it starts
// again, so hold the reference, not the pointer, past the call.
PyObject* interned_name(std::string_view name);

}  // namespace fastdyn::runtime
