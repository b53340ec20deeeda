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

// The source line of every code unit, in one walk over the code's location table (co_linetable,
// the format of CPython's Objects/locations.md, the same in 3.11 and 3.12): PyCode_Addr2Line scans
// the table from its start on each call, so asking it once per instruction made decoding quadratic
// (3.6 ms of GPT-2's 5.6 ms trace went there), and reading co_lines() through the C API made a
// tuple per range (80% of decoding, 15% of a cold GPT-2 trace). A unit with no line gets -1, as
// from PyCode_Addr2Line; a table that does not parse gives an empty vector (the caller asks
// PyCode_Addr2Line instead).
//
// The table: one entry per range of units; its first byte has the top bit set, bits 3-6 a code
// and bits 0-2 the range's length in units minus one; the bytes after it (top bit clear) hold
// varints of 6 bits a byte (bit 6: another byte follows). Code 15: no line; 14 (long form) and
// 13 (no columns): the line moves by a signed varint (its lowest bit the sign); 11 and 12: by 1
// and 2; 0-10: the line stays.
std::vector<int> unit_lines(PyCodeObject* code, int n_units) {
  PyObject* table = code->co_linetable;
  if (!table || !PyBytes_Check(table)) return {};
  const auto* p = reinterpret_cast<const uint8_t*>(PyBytes_AS_STRING(table));
  const uint8_t* const limit = p + PyBytes_GET_SIZE(table);
  std::vector<int> lines(static_cast<size_t>(n_units), -1);
  auto varint = [&](const uint8_t* q) -> int64_t {
    int64_t value = 0;
    for (int shift = 0; q < limit && shift < 60; shift += 6) {
      const uint8_t b = *q++;
      value |= static_cast<int64_t>(b & 63) << shift;
      if (!(b & 64)) return value;
    }
    return -1;  // ran off the table
  };
  int64_t line = code->co_firstlineno;
  int unit = 0;
  while (p < limit) {
    const uint8_t first = *p;
    if (!(first & 128)) return {};
    const int kind = (first >> 3) & 15;
    if (kind == 13 || kind == 14) {
      const int64_t v = varint(p + 1);
      if (v < 0) return {};
      line += (v & 1) ? -(v >> 1) : (v >> 1);
    } else if (kind == 11 || kind == 12) {
      line += kind - 10;
    }
    const int end = unit + (first & 7) + 1;
    for (int u = unit; u < end && u < n_units; ++u) lines[static_cast<size_t>(u)] = kind == 15 ? -1 : static_cast<int>(line);
    unit = end;
    do ++p; while (p < limit && !(*p & 128));
  }
  return lines;
}

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
