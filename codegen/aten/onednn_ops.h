// codegen/aten/onednn_ops.h — finding a pair of oneDNN operators (one that runs on a prepared
// weight, one that prepares it) in this torch's dispatcher (codegen/ layer; included by the
// held-weight executables only: the dispatcher headers are heavy).
#pragma once
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

namespace fastdyn::codegen {

template <class RunFn, class ReorderFn>
struct OneDnnPair {
  c10::TypedOperatorHandle<RunFn> run;
  c10::TypedOperatorHandle<ReorderFn> reorder;
};

// The two operators ("mkldnn::_linear_pointwise"...), or nullopt when this torch was built
// without oneDNN or without either of them.
template <class RunFn, class ReorderFn>
std::optional<OneDnnPair<RunFn, ReorderFn>> find_onednn_pair(const char* run, const char* reorder) {
  if (!at::hasMKLDNN()) return std::nullopt;
  auto& d = c10::Dispatcher::singleton();
  auto r = d.findSchema({run, ""});
  auto p = d.findSchema({reorder, ""});
  if (!r || !p) return std::nullopt;
  return OneDnnPair<RunFn, ReorderFn>{r->template typed<RunFn>(), p->template typed<ReorderFn>()};
}

}  // namespace fastdyn::codegen
