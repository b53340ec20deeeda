// symbolic/assembler.cpp — see assembler.h.
#include "symbolic/assembler.h"

#include <algorithm>

#include "runtime/errors.h"
#include "symbolic/opcodes.h"

namespace fastdyn::symbolic {
namespace {

// Locations table entry kinds (CPython's PyCodeLocationInfoKind).
constexpr int kLocationNoColumns = 13;
constexpr int kLocationLong = 14;

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

void Assembler::emit(uint8_t opcode, int arg, const Position& pos) {
  emit(opcode, arg, pos.line);
  items_.back().pos = pos;
}

Position position_of(PyCodeObject* code, int index) {
  Position p;
  if (!PyCode_Addr2Location(code, index * 2, &p.line, &p.col, &p.end_line, &p.end_col)) p = Position();
  return p;
}

int Assembler::new_label() {
  label_at_.push_back(-1);
  return static_cast<int>(label_at_.size() - 1);
}

void Assembler::bind(int label) { label_at_[static_cast<size_t>(label)] = static_cast<int>(items_.size()); }

void Assembler::emit_jump(uint8_t opcode, int label, int line) {
  FD_CHECK(opcode_info(opcode).flags & kJumpRelative, "emit_jump of a non-jump");
  items_.push_back(Item{opcode, 0, line, label});
}

void Assembler::resolve() {
  // A jump's argument is the distance in code units from the instruction after it to its label;
  // EXTENDED_ARG prefixes change distances, so iterate to a fixed point.
  for (int round = 0; round < 8; ++round) {
    std::vector<int> start(items_.size() + 1, 0);
    for (size_t i = 0; i < items_.size(); ++i) start[i + 1] = start[i] + code_units(items_[i].opcode, items_[i].arg);
    bool changed = false;
    for (size_t i = 0; i < items_.size(); ++i) {
      Item& it = items_[i];
      if (it.label < 0) continue;
      const int at = label_at_[static_cast<size_t>(it.label)];
      FD_CHECK(at >= 0 && static_cast<size_t>(at) > i, "jump to an unbound or backward label");
      const int arg = start[static_cast<size_t>(at)] - start[i + 1];
      if (arg != it.arg) {
        it.arg = arg;
        changed = true;
      }
    }
    if (!changed) return;
  }
  throw InternalError("jump arguments did not settle");
}

PyObject* Assembler::code_bytes() {
  resolve();
  std::string out;
  for (const Item& it : items_) {
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

PyObject* Assembler::line_table(int first_line) {
  resolve();
  std::string out;
  int prev_line = first_line;
  for (const Item& it : items_) {
    int units = code_units(it.opcode, it.arg);
    const bool columns = it.pos.col >= 0 && it.pos.end_col >= 0 && it.pos.end_line >= it.pos.line;
    while (units > 0) {
      const int len = std::min(units, 8);
      if (columns) {  // the long form: line delta, end line delta, column + 1, end column + 1
        out.push_back(static_cast<char>(0x80 | (kLocationLong << 3) | (len - 1)));
        write_signed_varint(out, it.line - prev_line);
        write_varint(out, static_cast<unsigned int>(it.pos.end_line - it.line));
        write_varint(out, static_cast<unsigned int>(it.pos.col + 1));
        write_varint(out, static_cast<unsigned int>(it.pos.end_col + 1));
      } else {
        out.push_back(static_cast<char>(0x80 | (kLocationNoColumns << 3) | (len - 1)));
        write_signed_varint(out, it.line - prev_line);
      }
      prev_line = it.line;
      units -= len;
    }
  }
  return PyBytes_FromStringAndSize(out.data(), static_cast<Py_ssize_t>(out.size()));
}

void write_exception_varint(std::string& out, int v, bool first) {
  // Most significant 6-bit group first; bit 6 continues; bit 7 marks an entry's first byte.
  int shift = 0;
  while ((v >> shift) >= 64) shift += 6;
  bool mark = first;
  for (; shift >= 0; shift -= 6) {
    char b = static_cast<char>((v >> shift) & 0x3f);
    if (shift > 0) b |= 0x40;
    if (mark) b |= static_cast<char>(0x80);
    mark = false;
    out.push_back(b);
  }
}

void Assembler::add_handler(int start_label, int end_label, int target_label, int depth, bool lasti) {
  handlers_.push_back({start_label, end_label, target_label, depth, lasti});
}

PyObject* Assembler::exception_table() {
  resolve();
  std::vector<int> start(items_.size() + 1, 0);
  for (size_t i = 0; i < items_.size(); ++i) start[i + 1] = start[i] + code_units(items_[i].opcode, items_[i].arg);
  auto at = [&](int label) {
    const int item = label_at_.at(static_cast<size_t>(label));
    FD_CHECK(item >= 0, "an exception-table label is unbound");
    return start[static_cast<size_t>(item)];
  };
  std::string out;
  for (const Handler& h : handlers_) {
    const int s = at(h.start), e = at(h.end);
    if (e <= s) continue;
    write_exception_varint(out, s, true);
    write_exception_varint(out, e - s, false);
    write_exception_varint(out, at(h.target), false);
    write_exception_varint(out, (h.depth << 1) | (h.lasti ? 1 : 0), false);
  }
  return PyBytes_FromStringAndSize(out.data(), static_cast<Py_ssize_t>(out.size()));
}

int Assembler::max_stack_depth() const {
  std::vector<int> at_label(label_at_.size(), -1);
  for (const Handler& h : handlers_)  // a handler starts with its depth, lasti and the exception
    at_label[static_cast<size_t>(h.target)] = h.depth + (h.lasti ? 1 : 0) + 1;
  int depth = 0, max_depth = 0;
  for (size_t i = 0; i < items_.size(); ++i) {
    for (size_t l = 0; l < label_at_.size(); ++l)
      if (label_at_[l] == static_cast<int>(i) && at_label[l] >= 0) depth = at_label[l];
    const Item& it = items_[i];
    if (it.label >= 0)
      at_label[static_cast<size_t>(it.label)] = depth + PyCompile_OpcodeStackEffectWithJump(it.opcode, it.arg, 1);
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

}  // namespace

CodeBuilder::CodeBuilder(int line, int free_base)
    : consts_(PyList_New(0)), names_(PyList_New(0)), line_(line), free_base_(free_base) {}

CodeBuilder::~CodeBuilder() {
  Py_XDECREF(consts_);
  Py_XDECREF(names_);
}

int CodeBuilder::const_index(PyObject* obj) { return intern(consts_, obj); }

int CodeBuilder::name_index(const std::string& name) {
  PyObject* n = PyUnicode_FromString(name.c_str());
  const int i = intern(names_, n);
  Py_DECREF(n);
  return i;
}

void CodeBuilder::load_const(PyObject* obj) { emit(op::LOAD_CONST, const_index(obj)); }

void CodeBuilder::load_attr(const std::string& name) {
  const int namei = name_index(name);
  emit(op::LOAD_ATTR, python_minor() >= 12 ? namei << 1 : namei);
}

void CodeBuilder::call(int nargs) {
#if FD_PY_MINOR == 11
  emit(op::PRECALL, nargs);
#endif
  emit(op::CALL, nargs);
}

void CodeBuilder::call_kw(int nargs, PyObject* kw_names) {
  emit(op::KW_NAMES, const_index(kw_names));
  call(nargs);
}

PyObject* CodeBuilder::consts_tuple() const { return PyList_AsTuple(consts_); }
PyObject* CodeBuilder::names_tuple() const { return PyList_AsTuple(names_); }

void CodeBuilder::store_deref(int free_index) { emit(op::STORE_DEREF, free_base_ + free_index); }
void CodeBuilder::delete_deref(int free_index) { emit(op::DELETE_DEREF, free_base_ + free_index); }

void CodeBuilder::load_closure(int free_index) {
#if FD_PY_MINOR >= 12
  emit(op::LOAD_FAST, free_base_ + free_index);  // 3.12's LOAD_CLOSURE is LOAD_FAST of the cell slot
#else
  emit(op::LOAD_CLOSURE, free_base_ + free_index);
#endif
}

std::vector<const Source*> shared_paths(const std::vector<SourcePtr>& inputs) {
  std::unordered_map<std::string, int> uses;  // by path: the inputs under it
  std::vector<std::pair<std::string, const Source*>> order;
  for (const SourcePtr& in : inputs) {
    std::vector<const Source*> chain;  // in's strict ancestors, root first
    for (const Source* s = in->parent.get(); s; s = s->parent.get()) chain.insert(chain.begin(), s);
    for (const Source* s : chain) {
      if (s->kind != Source::Kind::Attr && s->kind != Source::Kind::Item && s->kind != Source::Kind::DictItem) continue;
      std::string key = source_key(*s);
      if (uses[key]++ == 0) order.emplace_back(std::move(key), s);
    }
  }
  std::vector<const Source*> shared;
  for (const auto& [key, s] : order)
    if (uses[key] >= 2) shared.push_back(s);
  return shared;
}

void CodeBuilder::load_inputs(const std::vector<SourcePtr>& inputs, const std::vector<const Source*>& shared, int first_slot) {
  std::unordered_map<std::string, int> cached;
  for (size_t k = 0; k < shared.size(); ++k) {
    load_source(*shared[k], &cached);
    emit(op::STORE_FAST, first_slot + static_cast<int>(k));
    cached.emplace(source_key(*shared[k]), first_slot + static_cast<int>(k));
  }
  for (const SourcePtr& s : inputs) load_source(*s, &cached);
}

void CodeBuilder::load_source(const Source& s, const std::unordered_map<std::string, int>* cached) {
  if (cached && s.parent) {  // a path step, perhaps cached
    auto it = cached->find(source_key(s));
    if (it != cached->end()) {
      emit(op::LOAD_FAST, it->second);
      return;
    }
  }
  switch (s.kind) {
    case Source::Kind::Local:
      emit(op::LOAD_FAST, s.index);
      return;
    case Source::Kind::Global:
    case Source::Kind::Builtin:
      emit(op::LOAD_GLOBAL, name_index(s.name) << 1);
      return;
    case Source::Kind::Closure:
      emit(op::LOAD_DEREF, free_base_ + s.index);
      return;
    case Source::Kind::Const:
      load_const(s.object);
      return;
    case Source::Kind::Attr:
      load_source(*s.parent, cached);
      load_attr(s.name);
      return;
    case Source::Kind::DictItem: {
      load_source(*s.parent, cached);
      if (s.object && PyWeakref_CheckRef(s.object)) {  // a key held weakly (a tensor): ref()
        emit(op::PUSH_NULL, 0);
        load_const(s.object);
        call(0);
      } else if (s.object) {
        load_const(s.object);  // a key other than a str
      } else {
        PyObject* k = PyUnicode_FromString(s.name.c_str());
        load_const(k);
        Py_DECREF(k);
      }
      emit(op::BINARY_SUBSCR, 0);
      return;
    }
    case Source::Kind::Item: {
      load_source(*s.parent, cached);
      PyObject* i = PyLong_FromLong(s.index);
      load_const(i);
      Py_DECREF(i);
      emit(op::BINARY_SUBSCR, 0);
      return;
    }
  }
}


PyCodeObject* make_code(PyCodeObject* orig, CodeBuilder& b, int argcount, PyObject* varnames, int flags) {
  PyObject* code = b.as().code_bytes();
  PyObject* linetable = b.as().line_table(orig->co_firstlineno);
  PyObject* consts_t = b.consts_tuple();
  PyObject* names_t = b.names_tuple();
  PyObject* freevars = PyObject_GetAttrString(reinterpret_cast<PyObject*>(orig), "co_freevars");
  PyObject* cellvars = PyTuple_New(0);
  PyObject* exctable = b.as().exception_table();
  if (orig->co_nfreevars > 0) flags |= CO_NESTED;
  PyCodeObject* out = nullptr;
  if (code && linetable && consts_t && names_t && varnames && freevars && cellvars && exctable) {
    out = PyCode_NewWithPosOnlyArgs(argcount, 0, 0, static_cast<int>(PyTuple_GET_SIZE(varnames)),
                                    b.as().max_stack_depth(), flags, code, consts_t, names_t, varnames,
                                    freevars, cellvars, orig->co_filename, orig->co_name, orig->co_qualname,
                                    orig->co_firstlineno, linetable, exctable);
  }
  Py_XDECREF(code);
  Py_XDECREF(linetable);
  Py_XDECREF(consts_t);
  Py_XDECREF(names_t);
  Py_XDECREF(freevars);
  Py_XDECREF(cellvars);
  Py_XDECREF(exctable);
  if (!out) {
    PyErr_Clear();
    throw InternalError("assembling a transformed code object failed");
  }
  return out;
}

PyCodeObject* assemble_graph_call(PyCodeObject* orig, const TraceResult& trace, PyObject* graph) {
  const int nargs = argument_slots(orig);
  const int nfree = orig->co_nfreevars;
  const int line = trace.lineno > 0 ? trace.lineno : orig->co_firstlineno;
  const std::vector<const Source*> shared = shared_paths(trace.input_sources);
  const int nshared = static_cast<int>(shared.size());
  CodeBuilder b(line, nargs + nshared);
  b.as().emit(op::RESUME, 0, orig->co_firstlineno);
  if (nfree > 0) b.as().emit(op::COPY_FREE_VARS, nfree, orig->co_firstlineno);
  b.emit(op::PUSH_NULL, 0);
  b.load_const(graph);
  b.load_inputs(trace.input_sources, shared, nargs);
  b.call(static_cast<int>(trace.input_sources.size()));
  b.emit(op::RETURN_VALUE, 0);
  PyObject* varnames = PyTuple_New(nargs + nshared);
  for (int i = 0; i < nargs; ++i) PyTuple_SET_ITEM(varnames, i, Py_NewRef(PyTuple_GET_ITEM(orig->co_localsplusnames, i)));
  for (int k = 0; k < nshared; ++k) PyTuple_SET_ITEM(varnames, nargs + k, PyUnicode_FromFormat("___path%d", k));
  PyCodeObject* out = make_code(orig, b, nargs, varnames, CO_OPTIMIZED | CO_NEWLOCALS);
  Py_XDECREF(varnames);
  return out;
}

}  // namespace fastdyn::symbolic
