// symbolic/exceptions.cpp — a raise the trace itself handles: the try/except of a traced frame
// that catches a Raised (symbolic/tracer.h). The opcodes of the handler it jumps to
// (PUSH_EXC_INFO, CHECK_EXC_MATCH, POP_EXCEPT, RERAISE) are interpreter.cpp's.
#include <cstring>

#include "symbolic/opcodes.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {

bool Tracer::handle_raised(const Raised& r, size_t index) {
  FrameState& f = *frames_[index];
  if (!r.value) return false;
  // The inlined calls it leaves must have no block of their own there (a with block's __exit__,
  // a finally: not traced); nor may the handler be a with block's cleanup.
  for (size_t k = index + 1; k < frames_.size(); ++k) {
    const FrameState& g = *frames_[k];
    if (g.pc < g.insts.size() && !enclosing_handlers(g.code, g.insts[g.pc].index).empty()) return false;
  }
  const std::vector<ExceptionEntry> handlers = enclosing_handlers(f.code, f.insts[f.pc].index);
  if (handlers.empty()) return false;
  const ExceptionEntry& e = handlers.front();
  if (e.target < 0 || static_cast<size_t>(e.target) >= f.inst_at.size()) return false;
  const int target = f.inst_at[static_cast<size_t>(e.target)];
  if (target < 0 || static_cast<size_t>(e.depth) > f.stack.size()) return false;
  auto name_at = [&](size_t i) { return i < f.insts.size() ? opcode_info(f.insts[i].opcode).name : ""; };
  if (!std::strcmp(name_at(static_cast<size_t>(target) + 1), "WITH_EXCEPT_START")) return false;
  frames_.resize(index + 1);
  f.stack.resize(static_cast<size_t>(e.depth));
  if (e.lasti) {
    PyOwned lasti(PyLong_FromLong(f.insts[f.pc].index));
    f.stack.push_back(constant(lasti.p));
  }
  f.stack.push_back(constant(r.value.get()));
  f.next_pc = static_cast<size_t>(target);
  entering_handler_ = true;
  return true;
}

}  // namespace fastdyn::symbolic
