// symbolic/guard_builder.h — turns the guards a trace recorded into a runtime guard tree.
#pragma once
#include <memory>

#include "runtime/guards.h"
#include "symbolic/interpreter.h"

namespace fastdyn::symbolic {

// Builds the tree for `trace` (which must be ok), including global state (grad mode, default
// dtype) and tensor aliasing. Must run at compile time, right after the trace, while the traced
// objects are unchanged.
std::unique_ptr<runtime::GuardTree> build_guards(const TraceResult& trace);

}  // namespace fastdyn::symbolic
