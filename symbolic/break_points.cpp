// symbolic/break_points.cpp — the root frame's graph break: where the frame may break (not in a
// generator, a try block or a loop; inside a with block the continuation re-enters it), and the
// trace_frame entry that traces a frame, and on an untraceable instruction traces it again up to
// that instruction so that the transformed bytecode runs it and calls a continuation.
#include <cstring>
#include <string>
#include <vector>

#include "runtime/guards.h"
#include "symbolic/continuation.h"
#include "symbolic/opcodes.h"
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

// The instruction that begins the outermost loop around instruction `inst` (the target of a
// backward jump from below it to at or above it), or -1 outside loops.
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

// Why the root frame cannot break at instruction `inst`, or "" if it can.
std::string break_blocker(PyCodeObject* code, const std::vector<Instruction>& insts, int inst) {
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
  // block changed (continuation.cpp; the trace only enters grad-mode blocks and nullcontext).
  // A try block's handler would need the state of the frame at the break: not rebuilt.
  auto with_cleanup = [&](int target) {
    for (size_t k = 0; k + 1 < insts.size(); ++k)
      if (insts[k].index == target)
        return std::strcmp(opcode_info(insts[k].opcode).name, "PUSH_EXC_INFO") == 0 &&
               std::strcmp(opcode_info(insts[k + 1].opcode).name, "WITH_EXCEPT_START") == 0;
    return false;
  };
  // Every block around it must be a with.
  for (const ExceptionEntry& e : enclosing_handlers(code, in.index))
    if (!with_cleanup(e.target)) return "inside a try block";
  // (A break at a loop's first instruction is before the loop: trace_frame moves breaks there.)
  for (const Instruction& j : insts) {
    if (!(opcode_info(j.opcode).flags & kJumpBackward)) continue;
    const int target = j.next - j.arg;
    if (target < in.index && in.index < j.index) return "inside a loop";
  }
  return "";
}

}  // namespace

TraceResult trace_frame(const FrameInputs& frame) {
  TraceResult result;
  result.filename = PyUnicode_AsUTF8(frame.code->co_filename);
  result.lineno = frame.code->co_firstlineno;
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
    } catch (const Unsupported& e) {
      r.ok = false;
      r.reason = e.what();
    } catch (const c10::Error& e) {
      r.ok = false;
      r.reason = std::string("torch error during tracing: ") + e.what_without_backtrace();
    }
    if (PyErr_Occurred()) PyErr_Clear();
  };
  attempt(result, -1);
  if (result.ok || result.break_inst < 0) return result;

  // A graph break: trace again up to the instruction (sequence) that could not be traced, then
  // stop there. The frame's bytecode runs that instruction itself and calls a continuation.
  std::vector<Instruction> insts = decode(frame.code);
  const int failed = result.break_inst;
  const char* opname = opcode_info(insts[static_cast<size_t>(failed)].opcode).name;
  const bool is_call = std::strcmp(opname, "CALL") == 0 || std::strcmp(opname, "CALL_FUNCTION_EX") == 0;
  int start = is_call ? call_sequence_start(insts, failed) : failed;
  int end = failed;
  // Inside a loop the frame breaks before the loop instead: the graph covers the code up to it,
  // and the continuation (no instruction in between) runs the loop and what follows as written,
  // its calls compiled as frames of their own. A break inside a loop that begins the frame (a
  // continuation resuming at it, say) would capture nothing: the frame runs as written.
  const int loop = outermost_loop_head(insts, start);
  if (loop >= 0) {
    start = loop;
    end = loop - 1;
  }
  std::string blocker = break_blocker(frame.code, insts, start);
  if (!blocker.empty()) {
    result.reason += " (no graph break: " + blocker + ")";
    return result;
  }
  TraceResult again;
  again.filename = result.filename;
  attempt(again, start);
  if (!again.ok || !again.stopped) return result;  // not reproducible: run the frame eagerly
  if (loop >= 0 && again.graph.nodes.empty()) {
    result.reason += " (no graph break: inside a loop, with nothing to compile before it)";
    return result;
  }
  if (loop >= 0 && !again.stack.empty() && again.stack.back().kind == SymValue::Kind::Iterator) {
    // A for loop's iterator: rebuilt only where nothing but the loop can reach it.
    const SymBox* it = again.stack.back().box.get();
    bool reachable = false;
    for (const auto& l : again.locals) reachable = reachable || (l && l->box.get() == it);
    for (size_t i = 0; i + 1 < again.stack.size(); ++i) reachable = reachable || again.stack[i].box.get() == it;
    if (!reachable) again.stack.back().box->loop_only = true;
  }
  again.reason = result.reason + (loop >= 0 ? " (inside a loop: the frame breaks before the loop)" : "");
  again.lineno = result.lineno;
  again.break_inst = start;
  again.break_end = end;
  return again;
}

}  // namespace fastdyn::symbolic
