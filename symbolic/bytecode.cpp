// symbolic/bytecode.cpp — instruction decoding and the disassembly dump.
#include "symbolic/bytecode.h"

#include <cstdio>
#include <unordered_map>

#include "runtime/errors.h"
#include "symbolic/opcodes.h"

namespace fastdyn::symbolic {
namespace {

struct PyRef {  // owns one reference
  PyObject* p;
  ~PyRef() { Py_XDECREF(p); }
};

std::string repr_of(PyObject* o) {
  PyObject* r = PyObject_Repr(o);
  if (!r) { PyErr_Clear(); return "?"; }
  const char* s = PyUnicode_AsUTF8(r);
  std::string out = s ? s : "?";
  Py_DECREF(r);
  if (out.size() > 40) out = out.substr(0, 37) + "...";
  return out;
}

// The argument's meaning, for the dump: a name, a constant, a local.
std::string describe_arg(PyCodeObject* code, const Instruction& in) {
  const OpcodeInfo& info = opcode_info(in.opcode);
  auto tuple_item = [](PyObject* t, int i) -> std::string {
    if (!t || i < 0 || i >= PyTuple_GET_SIZE(t)) return "?";
    return repr_of(PyTuple_GET_ITEM(t, i));
  };
  if (info.flags & kHasConst) return tuple_item(code->co_consts, in.arg);
  if (info.flags & kHasName) {
    int namei = in.arg;
    if (in.opcode == op::LOAD_GLOBAL) namei >>= 1;
#if FD_PY_MINOR >= 12
    if (in.opcode == op::LOAD_ATTR || in.opcode == op::LOAD_SUPER_ATTR) namei >>= 1;
#endif
    return tuple_item(code->co_names, namei);
  }
  // In 3.11+ local, cell and free opargs all index localsplus.
  if (info.flags & (kHasLocal | kHasFree)) {
    PyObject* names = code->co_localsplusnames;
    if (in.arg < PyTuple_GET_SIZE(names)) {
      const char* s = PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, in.arg));
      return s ? s : "?";
    }
    return "?";
  }
  if (in.opcode == op::BINARY_OP) {
    const char* s = binary_op_symbol(in.arg);
    return s ? s : "?";
  }
  return "";
}

}  // namespace

std::vector<ExceptionEntry> exception_table(PyCodeObject* code) {
  // Varints of 6-bit groups, most significant first; bit 6 continues, bit 7 marks an entry start.
  std::vector<ExceptionEntry> out;
  PyObject* table = code->co_exceptiontable;
  if (!table || !PyBytes_Check(table)) return out;
  const auto* p = reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(table));
  const auto* end = p + PyBytes_GET_SIZE(table);
  auto varint = [&]() {
    int v = 0;
    while (p < end) {
      const uint8_t b = *p++;
      v = (v << 6) | (b & 0x3f);
      if (!(b & 0x40)) break;
    }
    return v;
  };
  while (p < end) {
    ExceptionEntry e;
    e.start = varint();
    e.end = e.start + varint();
    e.target = varint();
    const int dl = varint();
    e.depth = dl >> 1;
    e.lasti = dl & 1;
    out.push_back(e);
  }
  return out;
}

int jump_target(const Instruction& in) {
  return (opcode_info(in.opcode).flags & kJumpBackward) ? in.next - in.arg : in.next + in.arg;
}

int outermost_loop_head(const std::vector<Instruction>& insts, int inst) {
  const int at = insts[static_cast<size_t>(inst)].index;
  int head = -1;
  for (const Instruction& j : insts) {
    if (!(opcode_info(j.opcode).flags & kJumpBackward)) continue;
    const int target = j.next - j.arg;
    if (!(target <= at && at < j.index)) continue;
    for (size_t k = 0; k < insts.size(); ++k)
      if (insts[k].index == target && (head < 0 || static_cast<int>(k) < head)) head = static_cast<int>(k);
  }
  return head;
}

int instruction_at(const std::vector<Instruction>& insts, int unit) {
  for (size_t i = 0; i < insts.size(); ++i)
    if (insts[i].start == unit || insts[i].index == unit) return static_cast<int>(i);
  return -1;
}

std::vector<ExceptionEntry> enclosing_handlers(PyCodeObject* code, int unit) {
  const std::vector<ExceptionEntry> table = exception_table(code);
  auto covering = [&](int u) -> const ExceptionEntry* {
    for (const ExceptionEntry& e : table)
      if (u >= e.start && u < e.end) return &e;
    return nullptr;
  };
  std::vector<ExceptionEntry> out;
  for (const ExceptionEntry* e = covering(unit); e && out.size() < 32;) {
    out.push_back(*e);
    const ExceptionEntry* handler = covering(e->target);  // the handler's own range -> its cleanup
    e = handler ? covering(handler->target) : nullptr;     // the cleanup's range -> the next block out
  }
  return out;
}

namespace {

// The source line of every code unit, in one pass over code.co_lines() (public in 3.11 and 3.12):
// PyCode_Addr2Line scans the line table from its start on each call, so asking it once per
// instruction made decoding quadratic (3.6 ms of GPT-2's 5.6 ms trace went there). A unit with no
// line gets -1, as from PyCode_Addr2Line; on any failure, an empty vector (the caller asks
// PyCode_Addr2Line instead).
std::vector<int> unit_lines(PyCodeObject* code, int n_units) {
  std::vector<int> lines(static_cast<size_t>(n_units), -1);
  PyRef it{PyObject_CallMethod(reinterpret_cast<PyObject*>(code), "co_lines", nullptr)};
  if (!it.p) {
    PyErr_Clear();
    return {};
  }
  while (PyObject* item = PyIter_Next(it.p)) {
    PyRef entry{item};
    long start = 0, end = 0;
    PyObject* line = nullptr;
    if (!PyArg_ParseTuple(item, "llO", &start, &end, &line)) break;
    const long ln = line == Py_None ? -1 : PyLong_AsLong(line);
    for (long u = start / 2; u < end / 2 && u < n_units; ++u) lines[static_cast<size_t>(u)] = static_cast<int>(ln);
  }
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return {};
  }
  return lines;
}

}  // namespace

namespace {

std::vector<Instruction> decode_uncached(PyCodeObject* code) {
  PyRef bytes{PyCode_GetCode(code)};
  FD_CHECK(bytes.p && PyBytes_Check(bytes.p), "co_code is not bytes");
  const auto* raw = reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(bytes.p));
  const int n_units = static_cast<int>(PyBytes_GET_SIZE(bytes.p) / 2);
  const std::vector<int> lines = unit_lines(code, n_units);
  std::vector<Instruction> out;
  int ext = 0;
  int start = -1;
  for (int i = 0; i < n_units;) {
    uint8_t opc = raw[2 * i];
    int arg = raw[2 * i + 1] | (ext << 8);
    const OpcodeInfo& info = opcode_info(opc);
    FD_CHECK(info.name != nullptr, "unknown opcode " + std::to_string(opc));
    if (start < 0) start = i;
    int next = i + 1 + info.cache_entries;
    if (opc == op::EXTENDED_ARG) {
      ext = arg;
      i = next;
      continue;
    }
    Instruction in;
    in.index = i;
    in.start = start;
    in.opcode = opc;
    in.arg = arg;
    in.line = lines.empty() ? PyCode_Addr2Line(code, i * 2) : lines[static_cast<size_t>(i)];
    in.next = next;
    out.push_back(in);
    ext = 0;
    start = -1;
    i = next;
  }
  return out;
}

// code -> its instructions. Each entry holds a reference to its code object, so that no other code
// object can take a cached one's address while the entry lives.
struct DecodeMemo {
  std::unordered_map<PyCodeObject*, std::vector<Instruction>> insts;
  ~DecodeMemo() = delete;  // NB: leaked: code objects must not be released after Python finalises
};
DecodeMemo& memo() {
  static DecodeMemo* m = new DecodeMemo();
  return *m;
}
constexpr size_t kMaxMemoized = 4096;  // code objects; past that the memo starts over

}  // namespace

std::vector<Instruction> decode(PyCodeObject* code) {
  DecodeMemo& m = memo();
  auto hit = m.insts.find(code);
  if (hit != m.insts.end()) return hit->second;
  std::vector<Instruction> insts = decode_uncached(code);
  if (m.insts.size() >= kMaxMemoized) forget_decoded();
  Py_INCREF(code);
  return m.insts.emplace(code, std::move(insts)).first->second;
}

void forget_decoded() {
  DecodeMemo& m = memo();
  std::vector<PyCodeObject*> codes;
  codes.reserve(m.insts.size());
  for (const auto& kv : m.insts) codes.push_back(kv.first);
  m.insts.clear();
  for (PyCodeObject* c : codes) Py_DECREF(c);  // NB: after clear(): a dealloc may re-enter decode
}

std::string disassemble(PyCodeObject* code) {
  std::string out;
  const int first = code->co_firstlineno;
  int last_line = -2;
  for (const Instruction& in : decode(code)) {
    char line_col[16] = "";
    if (in.line != last_line) {
      if (in.line < 0) std::snprintf(line_col, sizeof line_col, "L?");
      else std::snprintf(line_col, sizeof line_col, "L+%d", in.line - first);
      last_line = in.line;
    }
    const OpcodeInfo& info = opcode_info(in.opcode);
    char buf[160];
    std::string desc = describe_arg(code, in);
    if (in.opcode >= FD_HAVE_ARGUMENT) {
      std::snprintf(buf, sizeof buf, "%-6s %4d %-22s %3d%s%s%s\n", line_col, in.index * 2,
                    info.name, in.arg, desc.empty() ? "" : " (", desc.c_str(),
                    desc.empty() ? "" : ")");
    } else {
      std::snprintf(buf, sizeof buf, "%-6s %4d %s\n", line_col, in.index * 2, info.name);
    }
    out += buf;
  }
  return out;
}

}  // namespace fastdyn::symbolic
