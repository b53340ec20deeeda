// tests/cpp/capture/recorded_graphs.h — building graphs the way capture does, for tests of the
// layers below it (shapes, backends): row-major input metadata, and a call recorded through a
// binder (its meta rule and symbolic rule run, as under the tracer).
#pragma once
#include "codegen/capture/capture.h"

#include <gtest/gtest.h>

#include <vector>

namespace fastdyn::codegen::recorded {

// Row-major metadata of `sizes` (f32, CPU).
inline TensorMeta contiguous(std::vector<int64_t> sizes) {
  TensorMeta m;
  m.sizes = sizes;
  m.strides.assign(sizes.size(), 1);
  for (size_t d = sizes.size(); d-- > 1;) m.strides[d - 1] = m.strides[d] * sizes[d];
  return m;
}

// Records family `f` on `args` into g; its first output, or -1 (a test failure) when refused.
inline ValueId record(Graph& g, Family f, std::vector<CallArg> args) {
  CaptureResult r = record_call(g, CaptureContext{}, f, args, {});
  EXPECT_TRUE(r.ok) << r.reason;
  return r.ok ? r.values.at(0) : -1;
}

}  // namespace fastdyn::codegen::recorded
