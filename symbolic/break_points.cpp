// symbolic/break_points.cpp — the root frame's graph break: where the frame may break (not in a
// generator; inside a with block the continuation re-enters it; inside a loop or try block, before
// the outermost of them), and the
// trace_frame entry that traces a frame, and on an untraceable instruction traces it again up to
// that instruction so that the transformed bytecode runs it and calls a continuation.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "runtime/guards.h"
#include "symbolic/opcodes.h"
#include "symbolic/py_ops.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {

namespace {

// The instruction sequence that makes the call at `inst` starts at its KW_NAMES / PRECALL.
int call_sequence_start(const std::vector<Instruction>& insts, int inst) {
  int s = inst;
  while (s > 0) {
    const char* prev = opcode_info(insts[static_cast<size_t>(s - 1)].opcode).name;
    if (std::strcmp(prev, "PRECALL") == 0 || std::strcmp(prev, "KW_NAMES") == 0) --s;
    else break;
  }
  return s;
}

// Whether the exception handler at code unit `target` is a with block's cleanup (PUSH_EXC_INFO,
// WITH_EXCEPT_START), as CPython compiles every with statement's.
bool with_cleanup(const std::vector<Instruction>& insts, int target) {
  for (size_t k = 0; k + 1 < insts.size(); ++k)
    if (insts[k].index == target)
      return std::strcmp(opcode_info(insts[k].opcode).name, "PUSH_EXC_INFO") == 0 &&
             std::strcmp(opcode_info(insts[k + 1].opcode).name, "WITH_EXCEPT_START") == 0;
  return false;
}

// The code unit where the try block (not a with block) whose handler is at `target` begins: the
// earliest of the exception-table ranges that share that handler (CPython splits a try body's
// range around what it nests).
int try_start(const std::vector<ExceptionEntry>& table, int target) {
  int start = -1;
  for (const ExceptionEntry& e : table)
    if (e.target == target && (start < 0 || e.start < start)) start = e.start;
  return start;
}

// The instruction that begins the outermost try block (not a with block) around instruction
// `inst`, or -1 outside try blocks.
int outermost_try_start(PyCodeObject* code, const std::vector<Instruction>& insts, int inst) {
  const std::vector<ExceptionEntry> table = exception_table(code);
  int unit = -1;
  for (const ExceptionEntry& e : enclosing_handlers(code, insts[static_cast<size_t>(inst)].index)) {
    if (with_cleanup(insts, e.target)) continue;
    const int start = try_start(table, e.target);
    if (unit < 0 || start < unit) unit = start;
  }
  for (size_t k = 0; unit >= 0 && k < insts.size(); ++k)
    if (insts[k].index == unit) return static_cast<int>(k);
  return -1;
}

// Where the frame breaks for an untraceable instruction at `inst` inside loops or try blocks:
// before the outermost of them (moving out until no loop or try block holds the point; a point
// at a loop's first instruction is held by it); nullopt outside them.
std::optional<int> before_blocks(PyCodeObject* code, const std::vector<Instruction>& insts, int inst) {
  std::optional<int> out;
  for (int at = inst;;) {
    const int loop = outermost_loop_head(insts, at);
    const int block = outermost_try_start(code, insts, at);
    if (loop < 0 && block < 0) return out;
    const int moved = std::min(loop < 0 ? at : loop, block < 0 ? at : block);
    if (out && moved == at) return out;
    out = at = moved;
  }
}

// Why the root frame cannot break at instruction `inst`, or "" if it can. `before_block`: the
// break runs no instruction of its own (before_blocks moved it before a loop or try block), so the
// try blocks that begin at `inst` are entered by the continuation alone.
std::string break_blocker(PyCodeObject* code, const std::vector<Instruction>& insts, int inst, bool before_block,
                          bool in_loop = false) {
  // Zero-argument super() reads the frame's first slot and its __class__ cell: in transformed
  // code and continuations the first slot holds something else.
  for (int i = 0; i < code->co_nfreevars; ++i) {
    PyObject* name = PyTuple_GET_ITEM(code->co_localsplusnames, code->co_nlocalsplus - code->co_nfreevars + i);
    if (PyUnicode_CompareWithASCIIString(name, "__class__") == 0) return "the function uses super() without arguments";
  }
  if (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) return "a generator frame";
  const Instruction& in = insts[static_cast<size_t>(inst)];
  // Inside a with block the continuation goes on within it: its copy of the bytecode keeps the
  // block's exception-table entry, and the rebuilt stack holds an __exit__ that restores what the
  // block changed (continuation.cpp; the trace only enters grad-mode, torch.autocast and
  // nullcontext blocks).
  // A try block's handler would need the state of the frame at the break: not rebuilt.
  const std::vector<ExceptionEntry> table = exception_table(code);
  for (const ExceptionEntry& e : enclosing_handlers(code, in.index)) {
    if (with_cleanup(insts, e.target)) continue;
    // (Before a block: one that begins here, and the finally blocks around its handlers, which
    // begin no earlier, are the continuation's alone.)
    if (before_block && try_start(table, e.target) >= in.index) continue;
    return "inside a try block";
  }
  // (A break at a loop's first instruction is before the loop: trace_frame moves breaks there,
  // unless it resumes inside the loop body: in_loop.)
  if (in_loop) return "";
  for (const Instruction& j : insts) {
    if (!(opcode_info(j.opcode).flags & kJumpBackward)) continue;
    const int target = j.next - j.arg;
    if (target < in.index && in.index < j.index) return "inside a loop";
  }
  return "";
}

// The iterators on the stack at a break (the for loops around it hold theirs there) are rebuilt
// only where nothing but their loop can reach them (and their items were fixed: continuation.cpp):
// marks those.
void mark_loop_iterators(TraceResult& r) {
  for (size_t k = 0; k < r.stack.size(); ++k) {
    SymValue& v = r.stack[k];
    if (v.kind != SymValue::Kind::Iterator) continue;
    const SymBox* it = v.box.get();
    bool reachable = false;
    for (const auto& l : r.locals) reachable = reachable || (l && l->box.get() == it);
    for (size_t i = 0; i < r.stack.size(); ++i) reachable = reachable || (i != k && r.stack[i].box.get() == it);
    if (!reachable) v.box->loop_only = true;
  }
}

}  // namespace

// Whether leaving a `with` on `mgr` can never swallow the block's exception: a
// contextlib.contextmanager whose generator has no handler that ends without re-raising (try
// and finally only: no except clause, no with block, no return from a finally). Such a block
// may be entered for real at a graph break, and the continuation resumes inside it: the
// transformed code's handler for a breaking instruction inside it calls its __exit__ and
// re-raises (continuation.cpp), which is all such an __exit__ can make of an exception.
bool exit_never_suppresses(PyObject* mgr) {
  static PyObject* generator_manager = resolve_python_name("contextlib._GeneratorContextManager");  // NB: kept
  if (!generator_manager || reinterpret_cast<PyObject*>(Py_TYPE(mgr)) != generator_manager) return false;
  PyOwned gen(PyObject_GetAttrString(mgr, "gen"));
  PyOwned code(gen.p && PyGen_CheckExact(gen.p) ? PyObject_GetAttrString(gen.p, "gi_code") : nullptr);
  if (!code.p || !PyCode_Check(code.p)) {
    PyErr_Clear();
    return false;
  }
  const std::vector<Instruction> insts = decode(reinterpret_cast<PyCodeObject*>(code.p));
  for (size_t k = 0; k < insts.size(); ++k) {
    const char* name = opcode_info(insts[k].opcode).name;
    if (!std::strcmp(name, "CHECK_EXC_MATCH") || !std::strcmp(name, "CHECK_EG_MATCH") || !std::strcmp(name, "WITH_EXCEPT_START"))
      return false;
    if (!std::strcmp(name, "POP_EXCEPT") && (k + 1 == insts.size() || std::strcmp(opcode_info(insts[k + 1].opcode).name, "RERAISE") != 0))
      return false;
  }
  return true;
}

TraceResult trace_frame(const FrameInputs& frame) {
  auto fresh_result = [&frame] {
    TraceResult r;
    r.filename = PyUnicode_AsUTF8(frame.code->co_filename);
    r.lineno = frame.code->co_firstlineno;
    return r;
  };
  TraceResult result = fresh_result();
  if (runtime::python_mode_active()) {  // the mode would see each op: the frame runs eagerly
    result.reason = "a TorchFunctionMode or TorchDispatchMode is active";
    return result;
  }
  auto attempt = [&](TraceResult& r, int stop_at) {
    try {
      Tracer tracer(frame, r, stop_at);
      tracer.run();
      r.ok = true;
    } catch (const NoBreak& e) {
      r.ok = false;
      r.reason = e.what();
      r.break_inst = -1;
    } catch (const Raised& e) {
      r.ok = false;
      r.reason = e.what();
      r.raises = true;
    } catch (const Unsupported& e) {
      r.ok = false;
      r.reason = e.what();
    } catch (const c10::Error& e) {
      r.ok = false;
      r.reason = std::string("torch error during tracing: ") + e.what_without_backtrace();
    }
    if (PyErr_Occurred()) PyErr_Clear();
  };
  if (frame.shapes) frame.shapes->traces++;
  attempt(result, -1);
  if (result.moved_after_read) {  // once: the history now holds the size that moved
    result = fresh_result();
    attempt(result, -1);
  }
  if (result.ok || result.break_inst < 0 || result.retry_later) return result;

  // A graph break: trace again up to the instruction (sequence) that could not be traced, then
  // stop there. The frame's bytecode runs that instruction itself and calls a continuation.
  std::vector<Instruction> insts = decode(frame.code);
  const int failed = result.break_inst;
  const char* opname = opcode_info(insts[static_cast<size_t>(failed)].opcode).name;
  const bool is_call = std::strcmp(opname, "CALL") == 0 || std::strcmp(opname, "CALL_FUNCTION_EX") == 0;
  int start = is_call ? call_sequence_start(insts, failed) : failed;
  int end = failed;
  // Inside a while loop, outside try blocks, the frame breaks in the loop body: its continuation
  // resumes there, and its trace goes on through the rest of the body and the loop's condition
  // into the next iteration up to the same break, so that each iteration is one graph; the
  // continuations hand on to each other through a trampoline (break_calls.h), not by nesting
  // calls. Only where a graph was recorded before the break, and no for loop holds an iterator
  // on the stack (its items still to come would be guarded anew at every iteration: such a
  // loop breaks before it, below).
  if (outermost_loop_head(insts, start) >= 0 && outermost_try_start(frame.code, insts, start) < 0 &&
      break_blocker(frame.code, insts, start, false, true).empty()) {
    TraceResult mid;
    mid.filename = result.filename;
    attempt(mid, start);
    const bool no_iterator = std::none_of(mid.stack.begin(), mid.stack.end(), [](const SymValue& v) { return v.kind == SymValue::Kind::Iterator; });
    if (mid.ok && mid.stopped && !mid.graph.nodes.empty() && no_iterator) {
      mid.reason = result.reason + " (inside a loop: the continuation resumes in its body)";
      mid.raises = result.raises;
      mid.lineno = result.lineno;
      mid.break_inst = start;
      mid.break_end = end;
      return mid;
    }
  }
  // Inside a loop or a try block the frame breaks before the outermost of them instead: the graph
  // covers the code up to it, and the continuation (no instruction in between) runs the loop or
  // block and what follows as written, its calls compiled as frames of their own. A break inside
  // one that begins the frame (a continuation resuming at it, say) would capture nothing: the
  // frame runs as written.
  const std::optional<int> before = before_blocks(frame.code, insts, start);
  const bool moved = before.has_value();
  if (moved) {
    start = *before;
    end = *before - 1;
  }
  std::string blocker = break_blocker(frame.code, insts, start, moved);
  if (!blocker.empty()) {
    result.reason += " (no graph break: " + blocker + ")";
    return result;
  }
  TraceResult again;
  again.filename = result.filename;
  attempt(again, start);
  if (!again.ok || !again.stopped) return result;  // not reproducible: run the frame eagerly
  if (moved && again.graph.nodes.empty()) {
    result.reason += " (no graph break: inside a loop or try block, with nothing to compile before it)";
    return result;
  }
  if (moved && std::strcmp(opcode_info(insts[static_cast<size_t>(start)].opcode).name, "FOR_ITER") == 0)
    mark_loop_iterators(again);
  again.reason = result.reason + (moved ? " (inside a loop or try block: the frame breaks before it)" : "");
  again.raises = result.raises;  // the instruction it stops at raises
  again.lineno = result.lineno;
  again.break_inst = start;
  again.break_end = end;
  return again;
}

}  // namespace fastdyn::symbolic
