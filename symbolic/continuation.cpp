// symbolic/continuation.cpp — see continuation.h.
#include "symbolic/continuation.h"

#include <torch/csrc/Size.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "codegen/shapes/propagate.h"
#include "runtime/errors.h"
#include "symbolic/assembler.h"
#include "symbolic/break_calls.h"
#include "symbolic/bytecode.h"
#include "symbolic/opcodes.h"
#include "symbolic/py_ops.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {
namespace {

struct CannotRebuild : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `seen`: the boxes visited (a closure can hold the cell that holds it).
void collect_tensors(const SymValue& v, std::vector<codegen::ValueId>& out, std::set<const SymBox*>& seen) {
  using K = SymValue::Kind;
  if (v.is_tensor()) {
    if (!v.source && std::find(out.begin(), out.end(), v.tensor) == out.end()) out.push_back(v.tensor);
    return;
  }
  if ((v.kind == K::List || v.kind == K::Dict || v.kind == K::Tuple) && v.source) return;  // loaded from its source
  if (v.kind == K::Constant && v.name != "__super__") return;
  if (v.box && !seen.insert(v.box.get()).second) return;
  for (const SymValue& i : v.kind == K::List ? v.box->items : v.items) collect_tensors(i, out, seen);
  if (v.kind == K::BoundMethod || v.kind == K::Method) return;
  if (v.kind == K::Dict || v.kind == K::Object || (v.kind == K::Cell && !v.obj))  // a cell of the frame: its value
    for (const SymValue& i : v.box->items) collect_tensors(i, out, seen);
  if (v.kind == K::Function) {  // its defaults and the cells it closes over
    for (const SymValue& i : v.box->items) collect_tensors(i, out, seen);
    for (const SymValue& i : v.box->closure) collect_tensors(i, out, seen);
  }
  if (v.kind == K::Iterator)  // the items still to come (a rebuilt iterator holds those)
    for (size_t i = v.box->pos; i < v.box->items.size(); ++i) collect_tensors(v.box->items[i], out, seen);
}

// How a breaking instruction uses the stack and where execution goes on.
struct Successor {
  int inst;          // original instruction index to resume at
  int kept;          // operands still on the stack on this path (JUMP_IF_*_OR_POP keeps one)
  int pushed;        // new non-NULL results
  bool via_jump;
};
struct BreakShape {
  int consumed = 0;
  std::vector<Successor> successors;
};

// Plain instructions a break may stop at: (operands popped, results pushed).
bool plain_effect(const char* name, int arg, int* pops, int* pushes) {
  static const std::tuple<const char*, int, int> table[] = {
      {"STORE_ATTR", 2, 0}, {"DELETE_ATTR", 1, 0}, {"STORE_SUBSCR", 3, 0}, {"DELETE_SUBSCR", 2, 0},
      {"STORE_GLOBAL", 1, 0}, {"BINARY_OP", 2, 1}, {"BINARY_SUBSCR", 2, 1}, {"COMPARE_OP", 2, 1},
      {"CONTAINS_OP", 2, 1}, {"UNARY_NOT", 1, 1}, {"UNARY_NEGATIVE", 1, 1}, {"UNARY_INVERT", 1, 1},
      {"GET_ITER", 1, 1}, {"IMPORT_NAME", 2, 1}, {"BUILD_STRING", -1, 1}, {"FORMAT_VALUE", -2, 1},
      {"BEFORE_WITH", 1, 2},  // only on a manager whose __exit__ never suppresses (interpreter.cpp)
  };
  for (const auto& [n, p, q] : table) {
    if (std::strcmp(n, name) != 0) continue;
    *pops = p == -1 ? arg : (p == -2 ? ((arg & 0x04) ? 2 : 1) : p);
    *pushes = q;
    return true;
  }
  if (std::strcmp(name, "LOAD_ATTR") == 0 && (python_minor() < 12 || !(arg & 1))) {
    *pops = 1;
    *pushes = 1;
    return true;
  }
  return false;
}

BreakShape shape_of(const std::vector<Instruction>& insts, int first, int last, int* jump_target) {
  BreakShape s;
  if (last < first) {  // no instruction: the continuation resumes at `first` (before a loop)
    s.successors.push_back({first, 0, 0, false});
    return s;
  }
  const Instruction& in = insts[static_cast<size_t>(last)];
  const char* name = opcode_info(in.opcode).name;
  const int next = last + 1;
  if (std::strcmp(name, "CALL") == 0) {
    s.consumed = in.arg + 2;
    s.successors.push_back({next, 0, 1, false});
    return s;
  }
  if (std::strcmp(name, "CALL_FUNCTION_EX") == 0) {
    s.consumed = 3 + (in.arg & 1);
    s.successors.push_back({next, 0, 1, false});
    return s;
  }
  if (first != last) throw CannotRebuild("an instruction sequence that is not a call");
  const uint32_t flags = opcode_info(in.opcode).flags;
  if (flags & kJumpRelative) {
    // A while loop's test at its bottom (3.11): a conditional jump back to the body, which the
    // transformed code takes forward to the body's continuation (forward_twin).
    if ((flags & kJumpBackward) && forward_twin(in.opcode) < 0) throw CannotRebuild("a backward jump");
    const int target = instruction_at(insts, symbolic::jump_target(in));
    if (target < 0) throw CannotRebuild("a jump into an instruction");
    *jump_target = target;
    if (std::strncmp(name, "POP_JUMP", 8) == 0) {
      s.consumed = 1;
      s.successors.push_back({next, 0, 0, false});
      s.successors.push_back({target, 0, 0, true});
      return s;
    }
    if (std::strstr(name, "_OR_POP")) {
      s.consumed = 1;
      s.successors.push_back({next, 0, 0, false});
      s.successors.push_back({target, 1, 0, true});
      return s;
    }
    throw CannotRebuild(std::string("a break at ") + name);
  }
  if (flags & (kHasLocal | kHasFree)) throw CannotRebuild(std::string("a break at ") + name);
  int pops = 0, pushes = 0;
  if (!plain_effect(name, in.arg, &pops, &pushes)) throw CannotRebuild(std::string("a break at ") + name);
  s.consumed = pops;
  s.successors.push_back({next, 0, pushes, false});
  return s;
}

// ---- continuation code objects

PyObject* shifted_exception_table(PyCodeObject* orig, int shift) {
  std::string out;
  for (const ExceptionEntry& e : exception_table(orig)) {
    write_exception_varint(out, e.start + shift, true);
    write_exception_varint(out, e.end - e.start, false);
    write_exception_varint(out, e.target + shift, false);
    write_exception_varint(out, (e.depth << 1) | (e.lasti ? 1 : 0), false);
  }
  return PyBytes_FromStringAndSize(out.data(), static_cast<Py_ssize_t>(out.size()));
}

// The slots of `code`'s cell variables (an argument that is one keeps its argument slot), in
// slot order: a continuation receives them as free variables (resume_code).
std::vector<int> cell_slots(PyCodeObject* code) {
  std::vector<int> out;
  PyOwned cellvars(PyCode_GetCellvars(code));
  for (Py_ssize_t c = 0; cellvars.p && c < PyTuple_GET_SIZE(cellvars.p); ++c)
    for (int i = 0; i < code->co_nlocalsplus; ++i)
      if (PyUnicode_Compare(PyTuple_GET_ITEM(code->co_localsplusnames, i), PyTuple_GET_ITEM(cellvars.p, c)) == 0) {
        out.push_back(i);
        break;
      }
  PyErr_Clear();
  std::sort(out.begin(), out.end());
  return out;
}

// orig's bytecode with its slot numbers moved to the continuation's layout: locals stay, the
// stack slots come after them (`shift`), then the free-variable slots, the original's cells
// (`cells`, its slots) first and its own free variables after them.
std::string remapped_body(PyCodeObject* orig, int nlocals, int shift, const std::vector<int>& cells) {
  PyOwned bytes(PyCode_GetCode(orig));
  std::string code(PyBytes_AS_STRING(bytes.p), static_cast<size_t>(PyBytes_GET_SIZE(bytes.p)));
  if (shift == 0 && cells.empty()) return code;
  const int first_free = orig->co_nlocalsplus - orig->co_nfreevars;
  const int free_base = nlocals + shift;  // the continuation's first free-variable slot
  auto moved = [&](int slot) {
    auto c = std::find(cells.begin(), cells.end(), slot);
    if (c != cells.end()) return free_base + static_cast<int>(c - cells.begin());
    if (slot >= first_free) return free_base + static_cast<int>(cells.size()) + slot - first_free;
    return slot < nlocals ? slot : slot + shift;
  };
  bool past_resume = false;
  for (const Instruction& in : decode(orig)) {
    // A cell of the frame made after its start (3.12's inlined comprehensions) would wrap the
    // one received. (A continuation's copy of its original's start is never run.)
    if (past_resume && in.opcode == op::MAKE_CELL && std::find(cells.begin(), cells.end(), in.arg) != cells.end())
      throw CannotRebuild("a cell made inside the function body");
    past_resume = past_resume || in.opcode == op::RESUME;
    if (!(opcode_info(in.opcode).flags & (kHasLocal | kHasFree))) continue;
    const int arg = moved(in.arg);
    if (arg == in.arg) continue;
    const int prefixes = in.index - in.start;
    if (arg >= (1 << (8 * (prefixes + 1)))) throw CannotRebuild("a local index that would need EXTENDED_ARG");
    for (int p = 0; p <= prefixes; ++p)
      code[static_cast<size_t>(2 * (in.start + p) + 1)] = static_cast<char>((arg >> (8 * (prefixes - p))) & 0xff);
  }
  return code;
}

// Continuations made in this process (kept alive by resume_code's cache): the number of
// instructions of their prologue, and the user's code object their body is a copy of (the
// original of the original, for a continuation of a continuation); their instruction
// `prologue + i` is its instruction i.
struct ResumeInfo {
  size_t prologue = 0;
  PyCodeObject* base = nullptr;
  std::shared_ptr<ShapeHistory> shapes;  // shared by the continuations of one resume point
};
std::unordered_map<PyCodeObject*, ResumeInfo>& resume_prologues() {
  static auto* m = new std::unordered_map<PyCodeObject*, ResumeInfo>();
  return *m;
}

// The sizes seen at each resume point (orig, instruction, stack layout), by the traces of all its
// continuations; cleared by forget_resume_shape_histories().
std::map<std::tuple<PyCodeObject*, int, std::vector<bool>>, std::shared_ptr<ShapeHistory>>& resume_shapes() {
  static auto* m = new std::map<std::tuple<PyCodeObject*, int, std::vector<bool>>, std::shared_ptr<ShapeHistory>>();
  return *m;
}

// Continuations that resume inside a loop body (its first instruction included): called once per
// iteration.
std::unordered_set<PyCodeObject*>& loop_resumes() {
  static auto* m = new std::unordered_set<PyCodeObject*>();
  return *m;
}

struct ResumeKey {
  PyCodeObject* code;
  int inst;
  std::vector<bool> layout;
  std::vector<bool> bound;
  bool operator<(const ResumeKey& o) const {
    return std::tie(code, inst, layout, bound) < std::tie(o.code, o.inst, o.layout, o.bound);
  }
};

// New reference to the continuation of `orig` at instruction `inst` with a stack of `layout`
// (true = NULL) and the locals `bound`. It takes ONE argument, a list of the locals (None where
// unbound) and the non-NULL stack items, which its prologue unpacks into its slots and then
// empties: the caller's stack holds its arguments until the call returns (CPython's CALL does
// under any PEP 523 hook), and holding the locals themselves there would keep alive what the
// continuation drops (`obj = None` must free obj as in eager). Cached for the process (the cache keeps `orig` alive, so
// its address is never reused), so that recompiles find the continuation's own cache entries.
PyCodeObject* resume_code(PyCodeObject* orig, const std::vector<Instruction>& insts, int inst,
                          const std::vector<bool>& layout, const std::vector<bool>& bound, const std::vector<int>& cells) {
  static std::map<ResumeKey, PyCodeObject*> cache;
  ResumeKey key{orig, inst, layout, bound};
  auto it = cache.find(key);
  if (it != cache.end()) return reinterpret_cast<PyCodeObject*>(Py_NewRef(reinterpret_cast<PyObject*>(it->second)));

  const int nlocals = orig->co_nlocals;
  int nstack = 0;
  for (bool is_null : layout) nstack += is_null ? 0 : 1;
  Assembler pro;
  const int line = orig->co_firstlineno;
  // None's index in the constants: the original's own tuple when it holds None (nearly always),
  // so that a continuation adds no reference to any constant (sys.getrefcount of a constant
  // tuple, CPython's test_coroutines, saw the copy); else a copy with None appended.
  const Py_ssize_t nconsts = PyTuple_GET_SIZE(orig->co_consts);
  int none_const = static_cast<int>(nconsts);
  for (Py_ssize_t i = 0; i < nconsts; ++i)
    if (PyTuple_GET_ITEM(orig->co_consts, i) == Py_None) {
      none_const = static_cast<int>(i);
      break;
    }
  pro.emit(op::RESUME, 0, line);
  const int nclosure = static_cast<int>(cells.size()) + orig->co_nfreevars;
  if (nclosure > 0) pro.emit(op::COPY_FREE_VARS, nclosure, line);
  // The list arrives in slot 0: unpack it into slots 0..n-1, then `del list[:]`.
  pro.emit(op::LOAD_FAST, 0, line);
  pro.emit(op::COPY, 1, line);
  pro.emit(op::UNPACK_SEQUENCE, nlocals + nstack, line);
  for (int i = 0; i < nlocals + nstack; ++i) pro.emit(op::STORE_FAST, i, line);
  pro.emit(op::LOAD_CONST, none_const, line);
  pro.emit(op::LOAD_CONST, none_const, line);
  pro.emit(op::BUILD_SLICE, 2, line);
  pro.emit(op::DELETE_SUBSCR, 0, line);
  for (int i = 0; i < nlocals; ++i)
    if (!bound[static_cast<size_t>(i)]) pro.emit(op::DELETE_FAST, i, line);
  int k = 0;
  for (bool is_null : layout) {
    if (is_null) pro.emit(op::PUSH_NULL, 0, line);
    else {
      // The slot lets go once the item is on the stack: it would hold the item (a call's result
      // stored to a local next) for as long as the function runs.
      pro.emit(op::LOAD_FAST, nlocals + k, line);
      pro.emit(op::DELETE_FAST, nlocals + k++, line);
    }
  }
  pro.emit(op::JUMP_FORWARD, insts[static_cast<size_t>(inst)].start, line);  // relative to the body start
  PyOwned pro_bytes(pro.code_bytes());
  const int pro_units = static_cast<int>(PyBytes_GET_SIZE(pro_bytes.p) / 2);

  std::string code(PyBytes_AS_STRING(pro_bytes.p), static_cast<size_t>(PyBytes_GET_SIZE(pro_bytes.p)));
  // With no local and no stack item, one spare slot still receives the (empty) list.
  const int extra = nlocals + nstack == 0 ? 1 : 0;
  const int nslots = nlocals + nstack + extra;
  code += remapped_body(orig, nlocals, nstack + extra, cells);
  std::string lines;
  for (int left = pro_units; left > 0; left -= 8)  // "no location": the line stays co_firstlineno
    lines.push_back(static_cast<char>(0x80 | (15 << 3) | (std::min(left, 8) - 1)));
  lines.append(PyBytes_AS_STRING(orig->co_linetable), static_cast<size_t>(PyBytes_GET_SIZE(orig->co_linetable)));

  PyOwned varnames(PyTuple_New(nslots));
  for (int i = 0; i < nlocals; ++i)
    PyTuple_SET_ITEM(varnames.p, i, Py_NewRef(PyTuple_GET_ITEM(orig->co_localsplusnames, i)));
  for (int i = 0; i < nstack; ++i)
    PyTuple_SET_ITEM(varnames.p, nlocals + i, PyUnicode_FromFormat("___stack%d", i));
  if (extra) PyTuple_SET_ITEM(varnames.p, 0, PyUnicode_FromString("___args"));
  PyOwned code_b(PyBytes_FromStringAndSize(code.data(), static_cast<Py_ssize_t>(code.size())));
  PyOwned lines_b(PyBytes_FromStringAndSize(lines.data(), static_cast<Py_ssize_t>(lines.size())));
  PyOwned exc(shifted_exception_table(orig, pro_units));
  // The original's cells (received from the transformed frame) and its free variables.
  PyOwned own_free(PyObject_GetAttrString(reinterpret_cast<PyObject*>(orig), "co_freevars"));
  PyOwned freevars(PyTuple_New(nclosure));
  for (size_t c = 0; c < cells.size(); ++c)
    PyTuple_SET_ITEM(freevars.p, static_cast<Py_ssize_t>(c), Py_NewRef(PyTuple_GET_ITEM(orig->co_localsplusnames, cells[c])));
  for (int f = 0; f < orig->co_nfreevars; ++f)
    PyTuple_SET_ITEM(freevars.p, static_cast<Py_ssize_t>(cells.size()) + f, Py_NewRef(PyTuple_GET_ITEM(own_free.p, f)));
  PyOwned cellvars(PyTuple_New(0));
  const int flags = orig->co_flags & ~(CO_VARARGS | CO_VARKEYWORDS);
  PyOwned consts(none_const < nconsts ? Py_NewRef(orig->co_consts) : PyTuple_New(nconsts + 1));
  if (none_const == nconsts) {
    for (Py_ssize_t i = 0; i < nconsts; ++i) PyTuple_SET_ITEM(consts.p, i, Py_NewRef(PyTuple_GET_ITEM(orig->co_consts, i)));
    PyTuple_SET_ITEM(consts.p, nconsts, Py_NewRef(Py_None));
  }
  PyCodeObject* out = PyCode_NewWithPosOnlyArgs(
      1, 0, 0, nslots, std::max(orig->co_stacksize + nstack + 1, nlocals + nstack + 3), flags,
      code_b.p, consts.p, orig->co_names, varnames.p, freevars.p, cellvars.p, orig->co_filename, orig->co_name,
      orig->co_qualname, orig->co_firstlineno, lines_b.p, exc.p);
  if (!out) {
    PyErr_Clear();
    throw CannotRebuild("creating the continuation's code object failed");
  }
  size_t prologue = 0;  // instructions up to the jump
  for (const Instruction& in : decode(out)) {
    ++prologue;
    if (in.opcode == op::JUMP_FORWARD) break;
  }
  auto from = resume_prologues().find(orig);
  // The continuations of one resume point differ only in which locals were unbound there (a
  // loop's first iteration, before `x = ...` ran): their traces remember sizes together, so that
  // one met at 9 then the other at 10 traces the second dynamic at once (a decode loop's second
  // step), instead of static at 10 and again dynamic at 11.
  std::shared_ptr<ShapeHistory>& shapes = resume_shapes()[std::make_tuple(orig, inst, layout)];
  if (!shapes) shapes = std::make_shared<ShapeHistory>();
  resume_prologues()[out] = ResumeInfo{prologue, from != resume_prologues().end() ? from->second.base : orig, shapes};
  // Inside a loop body: from a backward jump's target (the body's first instruction, where a
  // while loop's test resumes) up to that jump itself (where 3.11's test at the bottom resumes).
  const int at = insts[static_cast<size_t>(inst)].index;
  for (const Instruction& j : insts)
    if ((opcode_info(j.opcode).flags & kJumpBackward) && j.next - j.arg <= at && at <= j.index) loop_resumes().insert(out);
  Py_INCREF(reinterpret_cast<PyObject*>(orig));  // NB: see above: the cache keeps orig alive
  cache.emplace(key, reinterpret_cast<PyCodeObject*>(Py_NewRef(reinterpret_cast<PyObject*>(out))));
  return out;
}

// Where a continuation of `orig` at instruction `inst` resumes. A continuation's own
// continuation resumes in the user's code object, not in a copy of a copy: a loop that breaks at
// every iteration then hands on to one continuation, whose compiled entries serve every
// iteration (its stack slots are dead past its prologue; its free variables are the original's
// cells and free variables, in the same order). And resuming at an unconditional jump is
// resuming at its target (a jump moves no value): 3.12's while loop ends its test with a forward
// jump out and a JUMP_BACKWARD to the body, whose continuation is then the one a break at the
// loop's first test already made.
struct ResumeAt {
  PyCodeObject* code;
  std::vector<Instruction> insts;
  int inst;
  std::vector<bool> bound;
  std::vector<int> cells;
};

ResumeAt resume_at(PyCodeObject* orig, const std::vector<Instruction>& insts, int inst, const std::vector<bool>& bound,
                   const std::vector<int>& cells) {
  auto info = resume_prologues().find(orig);
  ResumeAt at{orig, {}, inst, bound, cells};
  if (info != resume_prologues().end() && inst >= static_cast<int>(info->second.prologue) && cells.empty()) {
    PyCodeObject* base = info->second.base;
    if (std::none_of(bound.begin() + base->co_nlocals, bound.end(), [](bool b) { return b; })) {
      at.code = base;
      at.inst = inst - static_cast<int>(info->second.prologue);
      at.bound.resize(static_cast<size_t>(base->co_nlocals));
      at.cells = cell_slots(base);
    }
  }
  at.insts = at.code == orig ? insts : decode(at.code);
  for (int hops = 0; hops < 4; ++hops) {
    const Instruction& j = at.insts[static_cast<size_t>(at.inst)];
    const bool back = j.opcode == op::JUMP_BACKWARD;
    if (!back && j.opcode != op::JUMP_FORWARD) break;
    const int target = instruction_at(at.insts, back ? j.next - j.arg : j.next + j.arg);
    if (target < 0) break;
    at.inst = target;
  }
  return at;
}

// ---- the transformed code

// Lists, dicts and records (dataclass instances) made in the trace, each built once into a
// spare local: two references to one list must stay one list after the rebuild (an append
// through either is seen by both), and a record stored to after the break is the very object
// the frame goes on with.
//
// Values read from outside the frame through an attribute or item path, a global or a free
// variable (`old = self.count`, `l = [n]`) are loaded into spare locals too, before the recorded
// stores are replayed: loaded after them, `self.count += 1; return old` would return the new
// count, and `l = [n]; n -= 1; return l` the new n.
struct BoxSlots {
  std::vector<const SymBox*> boxes;
  std::vector<const Source*> sources;  // preloaded when the trace replays attribute stores
  bool preload = false;
  bool functions_without_cells = false;  // a function made in the trace without a closure (or with keyword defaults)
  // Paths the graph's inputs share (shared_paths), read once each into spare locals.
  std::vector<const Source*> prefixes;
  size_t size() const { return boxes.size() + sources.size() + prefixes.size(); }
  static bool through_path(const Source* s) {
    for (; s; s = s->parent.get())
      if (s->kind == Source::Kind::Attr || s->kind == Source::Kind::Item || s->kind == Source::Kind::DictItem ||
          s->kind == Source::Kind::Global ||  // a global the effects may rebind (SetGlobal)
          s->kind == Source::Kind::Closure)   // a cell the effects may rebind (SetCell)
        return true;
    return false;
  }
  std::vector<const codegen::shapes::SizeExpr*> sizes;  // size-derived ints of the break state
  void collect(const SymValue& v) {
    using K = SymValue::Kind;
    if (v.kind == K::Constant && v.size) sizes.push_back(v.size.get());
    if (preload && v.source &&
        (v.kind == K::Constant || v.kind == K::Unread || v.kind == K::Tensor || v.kind == K::List || v.kind == K::Dict ||
         v.kind == K::Tuple || v.kind == K::Set) &&
        through_path(v.source.get()) &&
        std::find(sources.begin(), sources.end(), v.source.get()) == sources.end())
      sources.push_back(v.source.get());
    // Objects, sets, functions made in the trace and the cells they close over: one slot each (two
    // references stay one object), and what they hold, once (a closure may hold itself).
    if (v.kind == K::Object || v.kind == K::Function || v.kind == K::Set || (v.kind == K::Cell && !v.obj)) {
      if (std::find(boxes.begin(), boxes.end(), v.box.get()) != boxes.end()) return;
      boxes.push_back(v.box.get());
      functions_without_cells = functions_without_cells || (v.kind == K::Function && (v.box->closure.empty() || !v.field_names.empty()));
      for (const SymValue& i : v.box->items) collect(i);
      if (v.kind == K::Function) {
        for (const SymValue& i : v.items) collect(i);
        for (const SymValue& i : v.box->closure) collect(i);
        collect(v.box->annotations);
      }
      return;
    }
    if (v.kind == K::Iterator) {  // one slot (two references stay one iterator); its items to come
      if (std::find(boxes.begin(), boxes.end(), v.box.get()) != boxes.end()) return;
      boxes.push_back(v.box.get());
      for (size_t i = v.box->pos; i < v.box->items.size(); ++i) collect(v.box->items[i]);
      return;
    }
    if (v.kind == K::Record) {
      if (std::find(boxes.begin(), boxes.end(), v.box.get()) == boxes.end()) boxes.push_back(v.box.get());
    } else if ((v.kind == K::List || v.kind == K::Dict) && !v.source) {
      if (std::find(boxes.begin(), boxes.end(), v.box.get()) != boxes.end()) return;
      boxes.push_back(v.box.get());
    }
    for (const SymValue& i : v.kind == K::List ? v.box->items : v.items) collect(i);
    if (v.kind == K::Dict || (v.kind == K::Cell && !v.obj))  // a cell of the frame: its value
      for (const SymValue& i : v.box->items) collect(i);
  }
  void collect_trace(const TraceResult& t) {
    preload = std::any_of(t.effects.begin(), t.effects.end(), [](const TraceResult::SideEffect& e) { return e.replayed(); });
    for (const auto& l : t.locals)
      if (l) collect(*l);
    for (const SymValue& v : t.stack) collect(v);
    for (const TraceResult::SideEffect& e : t.effects) {
      if (!e.replayed()) continue;
      collect(e.target);
      collect(e.value);
    }
    if (!t.stopped) collect(t.return_value);
    // A size-derived int is computed from the sizes of the tensors its symbols came from: those
    // are loaded before the effects too.
    for (const codegen::shapes::SizeExpr* e : sizes)
      for (codegen::shapes::SymbolId sym : codegen::shapes::live(t.graph, *e).symbols()) {
        const Source* src = t.input_sources.at(static_cast<size_t>(t.graph.symbols.at(static_cast<size_t>(sym)).input)).get();
        if (preload && through_path(src) && std::find(sources.begin(), sources.end(), src) == sources.end()) sources.push_back(src);
      }
  }
};

struct Rebuilder {
  CodeBuilder& b;
  const std::vector<codegen::ValueId>& outputs;
  int out_slot;
  const BoxSlots& slots;
  int first_slot;  // local index of slots.boxes[0]
  const TraceResult& trace;
  std::vector<bool> built = std::vector<bool>(slots.boxes.size(), false);
  std::vector<bool> building = std::vector<bool>(slots.boxes.size(), false);

  int prefix_slot(size_t k) const { return first_slot + static_cast<int>(slots.boxes.size() + slots.sources.size() + k); }

  // Loads the values read through attribute/item paths into their slots (before the stores).
  void preload_sources() {
    for (size_t k = 0; k < slots.sources.size(); ++k) {
      b.load_source(*slots.sources[k]);
      b.emit(op::STORE_FAST, first_slot + static_cast<int>(slots.boxes.size() + k));
    }
  }
  // Loads v from where the trace read it: its preloaded slot, or its source.
  void load_sourced(const SymValue& v) {
    auto it = std::find(slots.sources.begin(), slots.sources.end(), v.source.get());
    if (it == slots.sources.end()) return b.load_source(*v.source);
    b.emit(op::LOAD_FAST, first_slot + static_cast<int>(slots.boxes.size()) + static_cast<int>(it - slots.sources.begin()));
  }

  // Loads a list/dict/record already built, or builds it (via `build`) and keeps it in its slot.
  template <typename Build>
  void boxed(const SymValue& v, Build build) {
    const size_t k = static_cast<size_t>(std::find(slots.boxes.begin(), slots.boxes.end(), v.box.get()) - slots.boxes.begin());
    FD_CHECK(k < slots.boxes.size(), "a list of the break state has no slot");
    if (built[k]) {
      b.emit(op::LOAD_FAST, first_slot + static_cast<int>(k));
      return;
    }
    if (building[k]) throw CannotRebuild("a " + describe(v) + " that holds itself");
    building[k] = true;
    build();
    b.emit(op::COPY, 1);
    b.emit(op::STORE_FAST, first_slot + static_cast<int>(k));
    built[k] = true;
  }

  // The list or dict the caller passed (v, read through its source) gets the items of v's box:
  // target[:] = [items] for a list; dict.clear(target), dict.update(target, {items}) for a dict
  // (its keys in the box's order, as eager's mutations left them).
  void set_contents(const SymValue& v) {
    if (v.kind == SymValue::Kind::List) {
      for (const SymValue& i : v.box->items) push(i);
      b.emit(op::BUILD_LIST, static_cast<int>(v.box->items.size()));
      load_sourced(v);
      b.load_const(Py_None);
      b.load_const(Py_None);
      b.emit(op::BUILD_SLICE, 2);
      b.emit(op::STORE_SUBSCR, 0);
      return;
    }
    static PyObject* clear = PyObject_GetAttrString(reinterpret_cast<PyObject*>(&PyDict_Type), "clear");    // NB: kept
    static PyObject* update = PyObject_GetAttrString(reinterpret_cast<PyObject*>(&PyDict_Type), "update");  // NB: kept
    b.emit(op::PUSH_NULL, 0);
    b.load_const(clear);
    load_sourced(v);
    b.call(1);
    b.emit(op::POP_TOP, 0);
    b.emit(op::PUSH_NULL, 0);
    b.load_const(update);
    load_sourced(v);
    for (size_t i = 0; i < v.box->keys.size(); ++i) {
      b.load_const(v.box->keys[i].obj);
      push(v.box->items[i]);
    }
    b.emit(op::BUILD_MAP, static_cast<int>(v.box->keys.size()));
    b.call(2);
    b.emit(op::POP_TOP, 0);
  }

  // A size-derived int the trace left unread (interpreter.cpp: it stays a symbol): computed from
  // the sizes of the tensors its symbols came from, so that one entry serves every size.
  void push_size(const codegen::shapes::SizeExpr& size) {
    const codegen::shapes::SizeExpr e = codegen::shapes::live(trace.graph, size);
    const std::optional<codegen::shapes::SizeExpr::Linear> lin = e.linear();
    if (!lin) throw CannotRebuild("a size-derived int that is not linear in the sizes: " + e.str());
    b.emit(op::PUSH_NULL, 0);
    b.load_const(size_expr_function());
    PyOwned constant(PyLong_FromLongLong(lin->constant));
    b.load_const(constant.p);
    for (const auto& [sym, coef] : lin->terms) {
      const codegen::SymbolSource& from = trace.graph.symbols.at(static_cast<size_t>(sym));
      SymValue input;
      input.source = trace.input_sources.at(static_cast<size_t>(from.input));
      load_sourced(input);
      PyOwned dim(PyLong_FromLong(from.dim)), c(PyLong_FromLongLong(coef));
      b.load_const(dim.p);
      b.load_const(c.p);
    }
    b.call(1 + 3 * static_cast<int>(lin->terms.size()));
  }

  void push(const SymValue& v) {
    using K = SymValue::Kind;
    switch (v.kind) {
      case K::Null: b.emit(op::PUSH_NULL, 0); return;
      case K::Tensor: {
        if (v.source) return load_sourced(v);
        auto it = std::find(outputs.begin(), outputs.end(), v.tensor);
        FD_CHECK(it != outputs.end(), "a tensor of the break state is not a graph output");
        b.emit(op::LOAD_FAST, out_slot);
        PyOwned i(PyLong_FromLong(static_cast<long>(it - outputs.begin())));
        b.load_const(i.p);
        b.emit(op::BINARY_SUBSCR, 0);
        return;
      }
      case K::Constant:
        if (v.size) return push_size(*v.size);
        if (v.name == "__super__" || v.name == "__fd_object_super__") throw CannotRebuild("a super() object");
        if (v.name == kTraceException) throw CannotRebuild("an exception made in the trace");
        if (v.source) return load_sourced(v);
        return b.load_const(v.obj);
      case K::Unread:  // a continuation's argument the trace never read: from where it was
        return load_sourced(v);
      case K::Slice: {
        std::vector<PyObject*> parts;
        for (const SymValue& p : v.items) {
          if (!p.is_constant()) throw CannotRebuild("a slice with a tensor bound");
          b.load_const(p.obj);
        }
        b.emit(op::BUILD_SLICE, 3);
        return;
      }
      case K::Tuple:  // one read from outside the frame is that very object (`is` holds)
        if (v.source) return load_sourced(v);
        if (v.torch_size) {  // torch.Size(tuple)
          static PyObject* size_type = reinterpret_cast<PyObject*>(&THPSizeType);
          b.emit(op::PUSH_NULL, 0);
          b.load_const(size_type);
        }
        for (const SymValue& i : v.items) push(i);
        b.emit(op::BUILD_TUPLE, static_cast<int>(v.items.size()));
        if (v.torch_size) b.call(1);
        return;
      case K::List:
        if (v.source) return load_sourced(v);
        return boxed(v, [&] {
          if (v.obj) {  // a list subclass: its class called on the list (objects.cpp)
            b.emit(op::PUSH_NULL, 0);
            b.load_const(v.obj);
          }
          for (const SymValue& i : v.box->items) push(i);
          b.emit(op::BUILD_LIST, static_cast<int>(v.box->items.size()));
          if (v.obj) b.call(1);
        });
      case K::Dict:
        if (v.source) return load_sourced(v);
        if (v.name == kObjectDict) throw CannotRebuild("the __dict__ of an object made in the trace");
        return boxed(v, [&] {
          if (v.obj) {  // OrderedDict({...}): the same order
            b.emit(op::PUSH_NULL, 0);
            b.load_const(v.obj);
          }
          for (size_t i = 0; i < v.box->keys.size(); ++i) {
            b.load_const(v.box->keys[i].obj);
            push(v.box->items[i]);
          }
          b.emit(op::BUILD_MAP, static_cast<int>(v.box->keys.size()));
          if (v.obj) b.call(1);
        });
      case K::Record:  // the real constructor, with every field by keyword, once
        return boxed(v, [&] {
          b.emit(op::PUSH_NULL, 0);
          b.load_const(v.obj);
          PyOwned names(PyTuple_New(static_cast<Py_ssize_t>(v.field_names.size())));
          for (size_t i = 0; i < v.field_names.size(); ++i) {
            push(v.items[i]);
            PyTuple_SET_ITEM(names.p, static_cast<Py_ssize_t>(i), PyUnicode_FromString(v.field_names[i].c_str()));
          }
          b.call_kw(static_cast<int>(v.items.size()), names.p);
        });
      case K::Object:  // object.__new__ and its attributes in assignment order, once (objects.cpp)
        return boxed(v, [&] {
          b.emit(op::PUSH_NULL, 0);
          b.load_const(object_builder());
          b.load_const(v.obj);
          for (size_t i = 0; i < v.box->keys.size(); ++i) {
            b.load_const(v.box->keys[i].obj);
            push(v.box->items[i]);
          }
          b.emit(op::BUILD_MAP, static_cast<int>(v.box->keys.size()));
          b.call(2);
        });
      case K::Set:  // the caller's set, or a copy of the trace's final set, once (set.copy keeps its table: eager's order)
        if (v.source) return load_sourced(v);
        return boxed(v, [&] {
          static PyObject* set_copy = PyObject_GetAttrString(reinterpret_cast<PyObject*>(&PySet_Type), "copy");  // NB: kept
          b.emit(op::PUSH_NULL, 0);
          b.load_const(set_copy);
          b.load_const(v.obj);
          b.call(1);
        });
      case K::Cell:
        if (v.obj) {  // the frame's own free variable: its cell
          if (!v.source || v.source->kind != Source::Kind::Closure) throw CannotRebuild("a cell of another function");
          return b.load_closure(v.source->index);
        }
        return boxed(v, [&] {  // a real cell holding the trace's value (empty: unbound)
          static PyObject* cell_type = reinterpret_cast<PyObject*>(&PyCell_Type);
          b.emit(op::PUSH_NULL, 0);
          b.load_const(cell_type);
          const bool empty = v.box->items.empty() || v.box->items[0].is_null();  // NULL: deleted in the trace
          if (!empty) push(v.box->items[0]);
          b.call(empty ? 0 : 1);
        });
      case K::Function:  // MAKE_FUNCTION as the trace saw it, with the same cells, once
        if (v.box->globals.obj != b.globals())
          throw CannotRebuild("a function made in another module's code");
        return boxed(v, [&] {
          int flags = 0;
          if (!v.box->items.empty()) {
            for (const SymValue& d : v.box->items) push(d);
            b.emit(op::BUILD_TUPLE, static_cast<int>(v.box->items.size()));
            flags |= 0x01;
          }
          if (!v.field_names.empty()) {
            for (size_t i = 0; i < v.field_names.size(); ++i) {
              PyOwned key(PyUnicode_FromString(v.field_names[i].c_str()));
              b.load_const(key.p);
              push(v.items[i]);
            }
            b.emit(op::BUILD_MAP, static_cast<int>(v.field_names.size()));
            flags |= 0x02;
          }
          if (v.box->annotations.obj || v.box->annotations.kind != K::Constant) {
            push(v.box->annotations);
            flags |= 0x04;
          }
          if (!v.box->closure.empty()) {
            for (const SymValue& c : v.box->closure) push(c);
            b.emit(op::BUILD_TUPLE, static_cast<int>(v.box->closure.size()));
            flags |= 0x08;
          }
          b.load_const(v.obj);
          b.emit(op::MAKE_FUNCTION, flags);
        });
      case K::NamedTuple: {
        if (!v.obj) throw CannotRebuild("a named tuple of unknown type");
        // A struct sequence (torch.return_types.max, ...) is made from one tuple of its fields;
        // a namedtuple, whatever its class's __new__, is the tuple of its final fields:
        // tuple.__new__(cls, (fields...)), what its generated __new__ (or a subclass's
        // super().__new__) runs, with no Python frame (which the hook would meet on every call,
        // and which for a subclass's own __new__ would run that code a second time).
        static PyObject* tuple_new = resolve_python_name("builtins.tuple.__new__");  // NB: kept for the process
        const bool struct_seq = PyObject_HasAttrString(v.obj, "n_sequence_fields");
        b.emit(op::PUSH_NULL, 0);
        if (!struct_seq) b.load_const(tuple_new);
        b.load_const(v.obj);
        for (const SymValue& i : v.items) push(i);
        b.emit(op::BUILD_TUPLE, static_cast<int>(v.items.size()));
        b.call(struct_seq ? 1 : 2);
        return;
      }
      case K::Method:
        push(v.items[0]);
        b.load_attr(v.name);
        return;
      case K::BoundMethod: {
        if (v.name == "__fd_null_exit__") {  // nullcontext's __exit__ does nothing: the traced manager's
          b.load_const(v.items.at(0).obj);
          b.load_attr("__exit__");
          return;
        }
        if (v.name == "__fd_autocast_exit__") {
          // A break inside a torch.autocast block the trace entered: the continuation goes on
          // inside it, so a new torch.autocast of the block's device, dtype and flags is entered
          // now, for real, and the stack gets its __exit__ (which the continuation replays after
          // its graph: __fd_real_autocast_exit__). As eager makes one per entry of the block.
          PyObject* mgr = v.items.at(0).obj;
          PyOwned device(PyObject_GetAttrString(mgr, "device")), dtype(PyObject_GetAttrString(mgr, "fast_dtype")),
              enabled(PyObject_GetAttrString(mgr, "_enabled")), cache(PyObject_GetAttrString(mgr, "_cache_enabled"));
          if (!device.p || !dtype.p || !enabled.p || !cache.p) { PyErr_Clear(); throw CannotRebuild("a torch.autocast without its settings"); }
          static PyObject* autocast = resolve_python_name("torch.amp.autocast_mode.autocast");  // NB: kept
          static PyObject* kw = Py_BuildValue("(sss)", "dtype", "enabled", "cache_enabled");    // NB: kept
          b.emit(op::PUSH_NULL, 0);
          b.load_const(autocast);
          for (PyObject* a : {device.p, dtype.p, enabled.p, cache.p}) b.load_const(a);
          b.call_kw(4, kw);
          b.emit(op::COPY, 1);
          b.load_attr("__enter__");
          b.emit(op::PUSH_NULL, 0);
          b.emit(op::SWAP, 2);
          b.call(0);
          b.emit(op::POP_TOP, 0);
          b.load_attr("__exit__");
          return;
        }
        if (v.name == "__fd_real_autocast_exit__") {  // a block entered for real before: its own __exit__
          push(v.items.at(0));
          b.load_attr("__exit__");
          return;
        }
        if (v.name == "__fd_object_init__") throw CannotRebuild("object.__init__ reached through super()");
        if (v.name == "__fd_grad_exit__") {
          // A break inside a grad-mode block: the continuation goes on inside it, so the mode is
          // set now and the stack gets a real __exit__ that restores the mode from before the
          // block: torch.set_grad_enabled(mode), its `prev` set to the traced one (the mode now
          // may already be the block's: a continuation of a continuation).
          static PyObject* set_grad_enabled = resolve_python_name("torch.set_grad_enabled");  // NB: kept
          b.emit(op::PUSH_NULL, 0);
          b.load_const(set_grad_enabled);
          b.load_const(v.items.at(2).obj);
          b.call(1);
          b.emit(op::COPY, 1);
          b.load_const(v.items.at(1).obj);
          b.emit(op::SWAP, 2);
          b.emit(op::STORE_ATTR, b.name_index("prev"));
          b.load_attr("__exit__");
          return;
        }
        if (v.name == "__fd_generic_getattr__") {  // super().__getattribute__: object's own lookup, bound
          static PyObject* method_type = reinterpret_cast<PyObject*>(&PyMethod_Type);
          static PyObject* object_getattribute =
              PyObject_GetAttrString(reinterpret_cast<PyObject*>(&PyBaseObject_Type), "__getattribute__");  // NB: kept
          b.emit(op::PUSH_NULL, 0);
          b.load_const(method_type);
          b.load_const(object_getattribute);
          push(v.items[0]);
          b.call(2);
          return;
        }
        if (!v.obj) {  // a container's method: the attribute of the rebuilt container
          push(v.items[0]);
          b.load_attr(v.name);
          return;
        }
        // types.MethodType(function, self): `self.name` could find another function (a method
        // reached through super() is shadowed by the subclass's own).
        static PyObject* method_type = reinterpret_cast<PyObject*>(&PyMethod_Type);
        b.emit(op::PUSH_NULL, 0);
        b.load_const(method_type);
        b.load_const(v.obj);
        push(v.items[0]);
        b.call(2);
        return;
      }
      case K::Iterator:  // iter() of a tuple of the items not yet produced (values.h: fixed)
        if (!v.box->fixed || !v.box->loop_only)
          throw CannotRebuild(v.box->fixed ? "an iterator the code can reach" : "an iterator over a list, dict or set (eager's would see it change)");
        return boxed(v, [&] {
          for (size_t i = v.box->pos; i < v.box->items.size(); ++i) push(v.box->items[i]);
          b.emit(op::BUILD_TUPLE, static_cast<int>(v.box->items.size() - v.box->pos));
          b.emit(op::GET_ITER, 0);
        });
      default:
        throw CannotRebuild("a " + describe(v) + " cannot be rebuilt");
    }
  }
};

// Copies one original instruction, moving its constant or name into the new tables and keeping
// its source position, so that an exception it raises shows eager's traceback line and carets.
void copy_instruction(CodeBuilder& b, PyCodeObject* orig, const Instruction& in) {
  const uint32_t flags = opcode_info(in.opcode).flags;
  int arg = in.arg;
  if (flags & kHasConst) {
    arg = b.const_index(PyTuple_GET_ITEM(orig->co_consts, in.arg));
  } else if (flags & kHasName) {
    int namei = in.arg, low = 0;
    if (in.opcode == op::LOAD_GLOBAL || (python_minor() >= 12 && in.opcode == op::LOAD_ATTR)) {
      namei = in.arg >> 1;
      low = in.arg & 1;
      arg = (b.name_index(PyUnicode_AsUTF8(PyTuple_GET_ITEM(orig->co_names, namei))) << 1) | low;
    } else {
      arg = b.name_index(PyUnicode_AsUTF8(PyTuple_GET_ITEM(orig->co_names, namei)));
    }
  }
  b.as().emit(in.opcode, arg, position_of(orig, in.index));
}

// The prologue shared by every transformed code: the graph call (its outputs in `out_slot`) and
// the side effects the trace recorded, in order.
void emit_graph_and_effects(CodeBuilder& b, PyCodeObject* orig, const TraceResult& trace, PyObject* graph,
                            Rebuilder& rb, int out_slot) {
  b.as().emit(op::RESUME, 0, orig->co_firstlineno);
  if (orig->co_nfreevars > 0) b.as().emit(op::COPY_FREE_VARS, orig->co_nfreevars, orig->co_firstlineno);
  if (graph) {
    // The inputs' shared paths once each (BoxSlots::prefixes), only while the inputs are
    // loaded: the effects after the graph may rebind what they read.
    b.emit(op::PUSH_NULL, 0);
    b.load_const(graph);
    b.load_inputs(trace.input_sources, rb.slots.prefixes, rb.prefix_slot(0));
    b.call(static_cast<int>(trace.input_sources.size()));
    b.emit(op::STORE_FAST, out_slot);
  }
  rb.preload_sources();
  for (const TraceResult::SideEffect& e : trace.effects) {
    if (e.kind == TraceResult::SideEffect::Kind::ClearList) {
      rb.push(e.target);
      b.load_const(Py_None);
      b.load_const(Py_None);
      b.emit(op::BUILD_SLICE, 2);
      b.emit(op::DELETE_SUBSCR, 0);
      continue;
    }
    if (e.kind == TraceResult::SideEffect::Kind::SetContents) {
      if (e.replayed()) rb.set_contents(e.target);
      continue;
    }
    if (e.kind == TraceResult::SideEffect::Kind::SetCell) {
      if (e.value.is_null()) {  // del of the free variable: the cell ends empty
        // The trace may have bound it first (`t = -y; ...; del t`: one merged effect), so the
        // cell can still be empty here: bind it, then delete (DELETE_DEREF of an empty cell
        // raises the NameError eager never raised).
        b.load_const(Py_None);
        b.store_deref(e.target.source->index);
        b.delete_deref(e.target.source->index);
        continue;
      }
      rb.push(e.value);
      b.store_deref(e.target.source->index);
      continue;
    }
    if (e.kind == TraceResult::SideEffect::Kind::CallMethod) {
      PyOwned method(PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(e.target.obj)), e.name.c_str()));
      FD_CHECK(method.p, "a replayed method the target's type lacks");
      b.emit(op::PUSH_NULL, 0);
      b.load_const(method.p);
      rb.push(e.target);
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(e.value.obj); ++i) b.load_const(PyTuple_GET_ITEM(e.value.obj, i));
      b.call(static_cast<int>(PyTuple_GET_SIZE(e.value.obj)) + 1);
      b.emit(op::POP_TOP, 0);
      continue;
    }
    if (e.kind == TraceResult::SideEffect::Kind::SetGlobal) {
      rb.push(e.value);
      b.emit(op::STORE_GLOBAL, b.name_index(e.name));
      continue;
    }
    if (e.value.is_null()) {  // del target.name
      rb.push(e.target);
      b.emit(op::DELETE_ATTR, b.name_index(e.name));
      continue;
    }
    rb.push(e.value);
    rb.push(e.target);
    b.emit(op::STORE_ATTR, b.name_index(e.name));
  }
  if (trace.grad_mode_after) {  // it left a grad-mode block entered before it: restore for real
    static PyObject* set_grad = resolve_python_name("torch._C._set_grad_enabled");  // NB: kept
    b.emit(op::PUSH_NULL, 0);
    b.load_const(set_grad);
    b.load_const(*trace.grad_mode_after ? Py_True : Py_False);
    b.call(1);
    b.emit(op::POP_TOP, 0);
  }
}

// The transformed code's locals: its parameters, the graph's output tuple, the box slots.
// nheld: slots holding the original's locals at a break (assemble_break), named as the
// original's, its parameters' as ___held_<name> (the parameter slots keep their names).
PyObject* transformed_varnames(PyCodeObject* orig, int nargs, size_t nboxes, int nheld = 0) {
  const Py_ssize_t base = nargs + 1 + static_cast<Py_ssize_t>(nboxes);
  PyObject* varnames = PyTuple_New(base + nheld);
  for (int i = 0; i < nargs; ++i) PyTuple_SET_ITEM(varnames, i, Py_NewRef(PyTuple_GET_ITEM(orig->co_localsplusnames, i)));
  PyTuple_SET_ITEM(varnames, nargs, PyUnicode_FromString("___graph_out"));
  for (size_t k = 0; k < nboxes; ++k)
    PyTuple_SET_ITEM(varnames, nargs + 1 + static_cast<Py_ssize_t>(k), PyUnicode_FromFormat("___box%d", static_cast<int>(k)));
  for (int i = 0; i < nheld; ++i) {
    PyObject* name = PyTuple_GET_ITEM(orig->co_localsplusnames, i);
    PyTuple_SET_ITEM(varnames, base + i, i < nargs ? PyUnicode_FromFormat("___held_%U", name) : Py_NewRef(name));
  }
  return varnames;
}

// Runs an assembler body; a state that cannot be rebuilt gives nullptr and *why.
template <typename Body>
PyCodeObject* or_why(std::string* why, Body body) {
  try {
    return body();
  } catch (const CannotRebuild& e) {
    *why = e.what();
  } catch (const Unsupported& e) {
    *why = e.what();
  }
  return nullptr;
}

}  // namespace

bool resumes_inside_loop(PyCodeObject* code) { return loop_resumes().count(code) != 0; }

ShapeHistory* resume_shape_history(PyCodeObject* code) {
  auto it = resume_prologues().find(code);
  return it == resume_prologues().end() ? nullptr : it->second.shapes.get();
}

void forget_resume_shape_histories() {
  for (auto& [key, shapes] : resume_shapes()) *shapes = ShapeHistory{};
}

bool is_resume_prologue(PyCodeObject* code, size_t inst) {
  auto it = resume_prologues().find(code);
  return it != resume_prologues().end() && inst < it->second.prologue;
}

std::vector<codegen::ValueId> break_outputs(const TraceResult& trace) {
  std::vector<codegen::ValueId> out;
  std::set<const SymBox*> seen;
  for (const auto& l : trace.locals)
    if (l) collect_tensors(*l, out, seen);
  for (const SymValue& v : trace.stack) collect_tensors(v, out, seen);
  for (const TraceResult::SideEffect& e : trace.effects) collect_tensors(e.value, out, seen);
  if (!trace.stopped) collect_tensors(trace.return_value, out, seen);
  return out;
}

PyCodeObject* assemble_return(PyCodeObject* orig, const TraceResult& trace, PyObject* graph,
                              const std::vector<codegen::ValueId>& outputs, PyObject* globals, std::string* why) {
  return or_why(why, [&] {
    const int nargs = argument_slots(orig);
    const int line = trace.lineno > 0 ? trace.lineno : orig->co_firstlineno;
    BoxSlots slots;
    slots.collect_trace(trace);
    if (graph) slots.prefixes = shared_paths(trace.input_sources);
    const int nboxes = static_cast<int>(slots.size());
    CodeBuilder b(line, nargs + 1 + nboxes);
    b.set_globals(globals);
    Rebuilder rb{b, outputs, nargs, slots, nargs + 1, trace};
    emit_graph_and_effects(b, orig, trace, graph, rb, nargs);
    rb.push(trace.return_value);
    b.emit(op::RETURN_VALUE, 0);
    PyOwned varnames(transformed_varnames(orig, nargs, slots.size()));
    return make_code(orig, b, nargs, varnames.p, CO_OPTIMIZED | CO_NEWLOCALS);
  });
}

PyCodeObject* assemble_break(PyCodeObject* orig, const TraceResult& trace, PyObject* graph,
                             const std::vector<codegen::ValueId>& outputs, PyObject* globals,
                             std::string* why) {
  return or_why(why, [&] {
    const std::vector<Instruction> insts = decode(orig);
    const bool continuation = is_resume_prologue(orig, 0);  // called by a trampoline: hands on its continuation
    int jump_target = -1;
    const BreakShape shape = shape_of(insts, trace.break_inst, trace.break_end, &jump_target);
    const int depth = static_cast<int>(trace.stack.size());
    if (shape.consumed > depth) throw CannotRebuild("stack underflow at the break");
    const int nargs = argument_slots(orig);
    const int nlocals = orig->co_nlocals;
    const int nfree = orig->co_nfreevars;
    const int line = trace.lineno > 0 ? trace.lineno : orig->co_firstlineno;
    const int out_slot = nargs;  // a spare local after the parameters
    BoxSlots slots;
    slots.collect_trace(trace);
    if (graph) slots.prefixes = shared_paths(trace.input_sources);
    // A function made in the frame and live at the break reaches the continuation as a new
    // function at every call: a closure is guarded by its parts, not its identity
    // (conversions.cpp); one without cells would be guarded by identity and recompile each call.
    if (slots.functions_without_cells) throw CannotRebuild("a function without cells made in the frame is live at the break");
    const int nboxes = static_cast<int>(slots.size());
    // The original's locals are held in slots of this frame (named as the original's) while the
    // breaking instruction runs, and handed to the continuation after it: should it raise, the
    // traceback keeps this frame and with it the locals, as it keeps the original frame in eager
    // (on the value stack they died before the handler ran).
    const int hold_base = nargs + 1 + nboxes;
    const int free_base = hold_base + nlocals;
    CodeBuilder b(line, free_base);
    b.set_globals(globals);
    Rebuilder rb{b, outputs, out_slot, slots, nargs + 1, trace};
    emit_graph_and_effects(b, orig, trace, graph, rb, out_slot);
    // NULL and a placeholder where each continuation's function goes, then its arguments. With
    // cells or free variables the placeholder is the continuation's closure, built now (the
    // graph's outputs are at hand): the frame's cells, as real cells holding the values the trace
    // left in them, then its own free variables' cells.
    const std::vector<int> cells = cell_slots(orig);
    const int nclosure = static_cast<int>(cells.size()) + nfree;
    b.emit(op::PUSH_NULL, 0);
    if (nclosure == 0) {
      b.load_const(Py_None);
    } else {
      for (int slot : cells) {  // the cells the frame's closures made before the break hold too
        const auto& c = trace.locals[static_cast<size_t>(slot)];
        if (!c || c->kind != SymValue::Kind::Cell || c->obj) throw CannotRebuild("a cell variable the trace did not make");
        rb.push(*c);
      }
      for (int f = 0; f < nfree; ++f) b.load_closure(f);
      b.emit(op::BUILD_TUPLE, nclosure);
    }
    std::vector<bool> bound(static_cast<size_t>(nlocals), false);
    for (int i = 0; i < nlocals; ++i) {
      const auto& l = trace.locals[static_cast<size_t>(i)];
      // An argument that is a cell travels in the closure; its local slot stays unbound.
      const bool cell = std::find(cells.begin(), cells.end(), i) != cells.end();
      bound[static_cast<size_t>(i)] = l.has_value() && !cell;
      if (l && !cell) {
        rb.push(*l);
        b.emit(op::STORE_FAST, hold_base + i);
      }
    }
    const int passthrough = depth - shape.consumed;
    std::vector<bool> below;  // NULL-ness of the stack items the instruction does not touch
    int passed = 0;
    for (int j = 0; j < depth; ++j) {
      const SymValue& v = trace.stack[static_cast<size_t>(j)];
      if (j < passthrough) {
        below.push_back(v.is_null());
        if (v.is_null()) continue;  // recreated by the continuation's prologue
        ++passed;
      }
      rb.push(v);
    }
    // The graph's output tuple and the boxed values are in the held locals or on the stack now:
    // let them go (the parameters and the held locals go once the continuation has its list).
    for (int slot = nargs; slot < hold_base; ++slot) {
      b.load_const(Py_None);
      b.emit(op::STORE_FAST, slot);
    }
    // Inside with blocks (grad mode, nullcontext: break_blocker), the breaking instruction keeps
    // their exception-table entries: should it raise, each block's __exit__ (on the rebuilt
    // stack) runs before the exception leaves, as in the original code.
    const int break_start = b.as().new_label(), break_stop = b.as().new_label();
    // (No instruction, before a loop or try block: nothing for a handler to cover.)
    const std::vector<ExceptionEntry> blocks = trace.break_end < trace.break_inst
                                                   ? std::vector<ExceptionEntry>{}
                                                   : enclosing_handlers(orig, insts[static_cast<size_t>(trace.break_inst)].index);
    for (const ExceptionEntry& e : blocks) {
      const Instruction* h = nullptr;
      for (const Instruction& in : insts)
        if (in.index == e.target) h = &in;
      if (!h || std::strcmp(opcode_info(h->opcode).name, "PUSH_EXC_INFO") != 0)
        throw CannotRebuild("a break inside a block other than with");  // break_blocker refuses these
    }
    b.as().bind(break_start);
    int label = -1;
    for (int i = trace.break_inst; i <= trace.break_end; ++i) {
      const Instruction& in = insts[static_cast<size_t>(i)];
      if (i == trace.break_end && shape.successors.size() == 2) {
        label = b.as().new_label();
        const int forward = forward_twin(in.opcode);  // to the continuation: always forward here
        b.as().emit_jump(forward >= 0 ? static_cast<uint8_t>(forward) : in.opcode, label, line);  // NB: bool(tensor) raises rarely; no columns
      } else {
        copy_instruction(b, orig, in);
      }
    }
    b.as().bind(break_stop);
    for (const Successor& s : shape.successors) {
      if (s.via_jump) b.as().bind(label);
      std::vector<bool> layout = below;
      for (int k = 0; k < s.kept + s.pushed; ++k) layout.push_back(false);
      const ResumeAt at = resume_at(orig, insts, s.inst, bound, cells);
      const int passed_locals = static_cast<int>(at.bound.size());
      PyOwned code(reinterpret_cast<PyObject*>(resume_code(at.code, at.insts, at.inst, layout, at.bound, at.cells)));
      // One list argument (see resume_code): the held locals, then the stack items.
      b.emit(op::BUILD_LIST, passed + s.kept + s.pushed);
      for (int i = 0; i < passed_locals; ++i) {
        if (bound[static_cast<size_t>(i)]) b.emit(op::LOAD_FAST, hold_base + i);
        else b.load_const(Py_None);
      }
      b.emit(op::BUILD_LIST, passed_locals);
      b.emit(op::SWAP, 2);
      b.emit(op::LIST_EXTEND, 1);
      // This frame's slots (parameters, held locals) would keep alive, for as long as the
      // continuation runs, what it drops (a local set to None, an activation no longer needed).
      for (int slot = 0; slot < free_base; ++slot) {
        if (slot >= nargs && slot < hold_base) continue;  // cleared before the instruction
        b.load_const(Py_None);
        b.emit(op::STORE_FAST, slot);
      }
      if (nclosure == 0) {
        PyOwned fn(PyFunction_New(code.p, globals));
        if (!fn.p) { PyErr_Clear(); throw CannotRebuild("creating the continuation failed"); }
        b.load_const(fn.p);
        b.emit(op::SWAP, 3);
        b.emit(op::POP_TOP, 0);
      } else {  // NULL, closure, list -> NULL, function, list
        b.emit(op::SWAP, 2);
        b.load_const(code.p);
        b.emit(op::MAKE_FUNCTION, 0x08);
        b.emit(op::SWAP, 2);
      }
      // NULL, continuation, list -> NULL, trampoline (or tail call), continuation, list
      b.load_const(continuation ? tail_call_function() : trampoline_function());
      b.emit(op::SWAP, 3);
      b.emit(op::SWAP, 2);
      b.call(2);
      b.emit(op::RETURN_VALUE, 0);
    }
    // The blocks' handlers, innermost first, as CPython compiles a with statement's (the exits
    // rebuilt here never suppress: grad mode's and nullcontext's return None, and a block
    // entered for real is one whose __exit__ cannot: interpreter.cpp, exit_never_suppresses).
    auto rebuilt_depth = [&](int original) {  // the transformed stack below the block's exit
      int d = 2;  // the continuation's NULL and placeholder (the locals are held in slots)
      for (int j = 0; j < original; ++j)
        if (!(j < passthrough && trace.stack[static_cast<size_t>(j)].is_null())) ++d;
      return d;
    };
    int from = break_start, to = break_stop;
    for (const ExceptionEntry& e : blocks) {
      const int depth = rebuilt_depth(e.depth);
      const int handler = b.as().new_label(), handler_end = b.as().new_label(), cleanup = b.as().new_label(),
                cleanup_end = b.as().new_label();
      b.as().add_handler(from, to, handler, depth, true);
      b.as().add_handler(handler, handler_end, cleanup, depth + 2, true);
      b.as().bind(handler);
      b.emit(op::PUSH_EXC_INFO, 0);
      b.emit(op::WITH_EXCEPT_START, 0);
      b.emit(op::POP_TOP, 0);
      b.emit(op::RERAISE, 2);
      b.as().bind(handler_end);
      b.as().bind(cleanup);
      b.emit(op::COPY, 3);
      b.emit(op::POP_EXCEPT, 0);
      b.emit(op::RERAISE, 1);
      b.as().bind(cleanup_end);
      from = cleanup;
      to = cleanup_end;
    }
    PyOwned varnames(transformed_varnames(orig, nargs, slots.size(), nlocals));
    return make_code(orig, b, nargs, varnames.p, CO_OPTIMIZED | CO_NEWLOCALS);
  });
}

}  // namespace fastdyn::symbolic
