// codegen/backends/backend_id.h — the names of the backends, as an enum (no other include: the
// hook's per-thread mode and cache entries carry one). The table is backends.h's.
#pragma once
#include <cstdint>

namespace fastdyn::codegen {

// Native is a request, not a backend: the best one built for the graph's device.
enum class Backend : uint8_t { Native, LlvmCpu, Cuda, Aten };

}  // namespace fastdyn::codegen
