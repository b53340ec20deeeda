// symbolic/assembler.cpp — see assembler.h.
#include "symbolic/assembler.h"

#include <algorithm>

#include "runtime/errors.h"
#include "symbolic/opcodes.h"

namespace fastdyn::symbolic {
namespace {

// Locations table entry kinds (CPython's PyCodeLocationInfoKind).
constexpr int kLocationNoColumns = 13;

void write_varint(std::string& out, unsigned int v) {
  while (v >= 64) {
    out.push_back(static_cast<char>(0x40 | (v & 0x3f)));
    v >>= 6;
  }
  out.push_back(static_cast<char>(v));
}

void write_signed_varint(std::string& out, int v) {
  write_varint(out, v < 0 ? ((static_cast<unsigned int>(-v) << 1) | 1) : (static_cast<unsigned int>(v) << 1));
}

int code_units(uint8_t opcode, int arg) {
  int prefixes = 0;
  for (unsigned int a = static_cast<unsigned int>(arg) >> 8; a; a >>= 8) ++prefixes;
  return prefixes + 1 + opcode_info(opcode).cache_entries;
}

}  // namespace

void Assembler::emit(uint8_t opcode, int arg, int line) {
  FD_CHECK(opcode_info(opcode).name, "emitting an unknown opcode");
  items_.push_back(Item{opcode, arg, line});
}

PyObject* Assembler::code_bytes() const {
  std::string out;
  for (const Item& it : items_) {
    std::vector<uint8_t> bytes;
    for (int shift = 24; shift >= 8; shift -= 8) {
      const int part = (it.arg >> shift) & 0xff;
      if ((static_cast<unsigned int>(it.arg) >> shift) != 0) {
        out.push_back(static_cast<char>(op::EXTENDED_ARG));
        out.push_back(static_cast<char>(part));
      }
    }
    out.push_back(static_cast<char>(it.opcode));
    out.push_back(static_cast<char>(it.arg & 0xff));
    for (int c = 0; c < opcode_info(it.opcode).cache_entries; ++c) out.append(2, '\0');
  }
  return PyBytes_FromStringAndSize(out.data(), static_cast<Py_ssize_t>(out.size()));
}

PyObject* Assembler::line_table(int first_line) const {
  std::string out;
  int prev_line = first_line;
  for (const Item& it : items_) {
    int units = code_units(it.opcode, it.arg);
    while (units > 0) {
      const int len = std::min(units, 8);
      out.push_back(static_cast<char>(0x80 | (kLocationNoColumns << 3) | (len - 1)));
      write_signed_varint(out, it.line - prev_line);
      prev_line = it.line;
      units -= len;
    }
  }
  return PyBytes_FromStringAndSize(out.data(), static_cast<Py_ssize_t>(out.size()));
}

int Assembler::max_stack_depth() const {
  int depth = 0, max_depth = 0;
  for (const Item& it : items_) {
    depth += PyCompile_OpcodeStackEffectWithJump(it.opcode, it.arg, 0);
    FD_CHECK(depth >= 0, std::string("negative stack depth at ") + opcode_info(it.opcode).name);
    max_depth = std::max(max_depth, depth);
  }
  return max_depth;
}

int argument_slots(PyCodeObject* code) {
  const int flags = code->co_flags;
  return code->co_argcount + code->co_kwonlyargcount + ((flags & CO_VARARGS) ? 1 : 0) +
         ((flags & CO_VARKEYWORDS) ? 1 : 0);
}

namespace {

// Index of `obj` in `list`, appending it if absent (identity for objects, equality for names).
int intern(PyObject* list, PyObject* obj) {
  const Py_ssize_t n = PyList_GET_SIZE(list);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PyList_GET_ITEM(list, i);
    if (item == obj) return static_cast<int>(i);
    if (PyUnicode_CheckExact(item) && PyUnicode_CheckExact(obj) && PyUnicode_Compare(item, obj) == 0)
      return static_cast<int>(i);
    if (PyLong_CheckExact(item) && PyLong_CheckExact(obj) && PyObject_RichCompareBool(item, obj, Py_EQ) == 1)
      return static_cast<int>(i);
  }
  PyList_Append(list, obj);
  return static_cast<int>(n);
}

struct Emitter {
  Assembler& as;
  PyObject* consts;  // list
  PyObject* names;   // list
  int line;
  int free_base;     // localsplus index of the first free variable in the new code

  void load_source(const Source& s) {
    switch (s.kind) {
      case Source::Kind::Local:
        as.emit(op::LOAD_FAST, s.index, line);
        return;
      case Source::Kind::Global:
      case Source::Kind::Builtin: {
        PyObject* n = PyUnicode_FromString(s.name.c_str());
        as.emit(op::LOAD_GLOBAL, intern(names, n) << 1, line);
        Py_DECREF(n);
        return;
      }
      case Source::Kind::Closure:
        as.emit(op::LOAD_DEREF, free_base + s.index, line);
        return;
      case Source::Kind::Attr: {
        load_source(*s.parent);
        PyObject* n = PyUnicode_FromString(s.name.c_str());
        const int namei = intern(names, n);
        Py_DECREF(n);
        as.emit(op::LOAD_ATTR, python_minor() >= 12 ? namei << 1 : namei, line);
        return;
      }
      case Source::Kind::DictItem: {
        load_source(*s.parent);
        PyObject* k = PyUnicode_FromString(s.name.c_str());
        as.emit(op::LOAD_CONST, intern(consts, k), line);
        Py_DECREF(k);
        as.emit(op::BINARY_SUBSCR, 0, line);
        return;
      }
      case Source::Kind::Item: {
        load_source(*s.parent);
        PyObject* i = PyLong_FromLong(s.index);
        as.emit(op::LOAD_CONST, intern(consts, i), line);
        Py_DECREF(i);
        as.emit(op::BINARY_SUBSCR, 0, line);
        return;
      }
    }
  }
};

}  // namespace

PyCodeObject* assemble_graph_call(PyCodeObject* orig, const TraceResult& trace, PyObject* graph) {
  const int nargs = argument_slots(orig);
  const int nfree = orig->co_nfreevars;
  PyObject* consts = PyList_New(0);
  PyObject* names = PyList_New(0);
  PyList_Append(consts, graph);
  const int line = trace.lineno > 0 ? trace.lineno : orig->co_firstlineno;

  Assembler as;
  Emitter em{as, consts, names, line, nargs};
  as.emit(op::RESUME, 0, orig->co_firstlineno);
  if (nfree > 0) as.emit(op::COPY_FREE_VARS, nfree, orig->co_firstlineno);
  as.emit(op::PUSH_NULL, 0, line);
  as.emit(op::LOAD_CONST, 0, line);
  for (const SourcePtr& s : trace.input_sources) em.load_source(*s);
  const int ninputs = static_cast<int>(trace.input_sources.size());
#if FD_PY_MINOR == 11
  as.emit(op::PRECALL, ninputs, line);
#endif
  as.emit(op::CALL, ninputs, line);
  as.emit(op::RETURN_VALUE, 0, line);

  PyObject* code = as.code_bytes();
  PyObject* linetable = as.line_table(orig->co_firstlineno);
  PyObject* consts_t = PyList_AsTuple(consts);
  PyObject* names_t = PyList_AsTuple(names);
  PyObject* varnames = PyTuple_GetSlice(orig->co_localsplusnames, 0, nargs);
  PyObject* freevars = PyObject_GetAttrString(reinterpret_cast<PyObject*>(orig), "co_freevars");
  PyObject* cellvars = PyTuple_New(0);
  PyObject* exctable = PyBytes_FromStringAndSize("", 0);
  int flags = CO_OPTIMIZED | CO_NEWLOCALS;
  if (nfree > 0) flags |= CO_NESTED;
  PyCodeObject* out = nullptr;
  if (code && linetable && consts_t && names_t && varnames && freevars && cellvars && exctable) {
    out = PyCode_NewWithPosOnlyArgs(nargs, 0, 0, nargs, as.max_stack_depth(), flags, code, consts_t, names_t,
                                    varnames, freevars, cellvars, orig->co_filename, orig->co_name,
                                    orig->co_qualname, orig->co_firstlineno, linetable, exctable);
  }
  Py_XDECREF(code);
  Py_XDECREF(linetable);
  Py_XDECREF(consts_t);
  Py_XDECREF(names_t);
  Py_XDECREF(varnames);
  Py_XDECREF(freevars);
  Py_XDECREF(cellvars);
  Py_XDECREF(exctable);
  Py_DECREF(consts);
  Py_DECREF(names);
  if (!out) {
    PyErr_Clear();
    throw InternalError("assembling the transformed code object failed");
  }
  return out;
}

}  // namespace fastdyn::symbolic
