// symbolic/dynamic_mode.h — the `dynamic` setting of a trace (its own header: eval_hook's
// config.h carries it in every request without the interpreter's headers).
#pragma once
#include <cstdint>

namespace fastdyn::symbolic {

// Which tensor dims become size symbols (codegen/shapes/propagate.h), the `dynamic` of
// jit(..., dynamic=...): Auto (None) specialises every size at a first trace and makes a dim
// symbolic once a later trace of the same code sees it with another size; Always (True) makes
// every dim of more than one element symbolic from the first trace; Never (False) none.
// fastdyn.mark_dynamic(t, dim) marks a dim of one tensor symbolic from its first trace (except
// under Never).
enum class DynamicMode : uint8_t { Auto, Always, Never };

}  // namespace fastdyn::symbolic
