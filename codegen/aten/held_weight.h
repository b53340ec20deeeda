// codegen/aten/held_weight.h — a tensor derived from a weight once (a reordered or re-laid-out
// copy) and reused while the weight is unchanged (codegen/ layer).
//
// The derived copy is made only after two calls in a row brought the weight unchanged: a weight
// that changes every call (training) never pays for it. "Unchanged" means the same tensor object
// with the same data pointer, version counter and a sample of its bits: an in-place update
// (optimizer step, copy_, `.data =`) bumps the version or swaps the storage, and the whole-weight
// writes through `.data` that bypass the version counter (rescaling, averaging, re-initialising)
// change the sample; a write to a few elements between the samples, through `.data` or a NumPy
// view, may not be seen (FASTDYN_PREPACK=0 turns every held weight off).
#pragma once
#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>

namespace fastdyn::codegen {

// Whether held weights are on (FASTDYN_PREPACK is not "0").
bool held_weights_enabled();

class HeldWeight {
 public:
  // The copy make() derives from `w` (a contiguous float32 CPU tensor), or an undefined tensor
  // (use `w` itself) until `w` came unchanged twice, and again after it changed.
  at::Tensor get(const at::Tensor& w, const std::function<at::Tensor()>& make);

 private:
  // A weight as a call saw it. The tensor is held, so its address cannot be reused by another;
  // the data pointer and version are snapshots.
  static constexpr int kSamples = 16;
  struct Seen {
    at::Tensor tensor;
    const void* data = nullptr;
    uint32_t version = 0;
    std::array<uint32_t, kSamples> bits{};
    static Seen of(const at::Tensor& w);
    bool same_as(const Seen& o) const;
  };
  std::mutex mutex_;  // NB: big graphs run without the GIL (runtime/compiled_graph.cpp): calls may overlap.
  Seen seen_, made_for_;
  at::Tensor made_;
};

}  // namespace fastdyn::codegen
