// codegen/loop/check_plan.h — what accuracy mode compares in a planned program
// (runtime/accuracy_check.h), built beside its runtime program (codegen/ layer; backend-neutral).
#pragma once
#include <memory>
#include <string>

#include "codegen/loop/loop_ir.h"
#include "runtime/accuracy_check.h"

namespace fastdyn::codegen::loop {

// Per step of p, the graph values its kernel stores that live in slots after it ran, and the
// reference: p.graph on the aten backend with those values as outputs. nullptr when the graph
// draws random numbers (the reference would draw again, and move the generator that the program
// alone should) or when the aten backend cannot run it.
std::shared_ptr<const runtime::CheckPlan> check_plan(const Program& p, const std::string& backend);

}  // namespace fastdyn::codegen::loop
