// codegen/capture/view_helpers.h — helpers shared by the view, subscript and factory binders
// (capture_views.cpp, capture_subscript.cpp, capture_factories.cpp).
#pragma once
#include "codegen/capture/binder.h"

#include <optional>
#include <string>
#include <vector>

namespace fastdyn::codegen::views {

bool differentiable(c10::ScalarType t);

// `out` with requires_grad as eager sets it on a fresh result: some input requires grad, grad
// mode is on and the output's dtype can carry gradients. NB: views need no such step: the view
// rules copy the base's metadata, and eager views report their base's requires_grad even under
// no_grad.
TensorMeta derived(const BindCall& c, TensorMeta out, const std::vector<ValueId>& from);

// "op: why", as a failed capture.
CaptureResult fail(const char* op, const std::string& why);

// Binds `call` to `sig`; on failure fills `err`.
bool bind_sig(const Signature& sig, const BindCall& call, BoundArgs& a, CaptureResult& err);

Arg opt_int(const std::optional<int64_t>& v);
ValueId emit_unsqueeze(BindCall& c, ValueId self, int64_t dim);
ValueId emit_slice(BindCall& c, ValueId self, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
                   int64_t step);
bool is_index_dtype(c10::ScalarType t);  // int32 or int64

}  // namespace fastdyn::codegen::views
