// codegen/llvm/perf_map.h — names for generated code in `perf report`.
//
// With FASTDYN_PERF_MAP=1, every kernel object the JIT links (compiled or loaded from the disk
// cache) appends one line per function to /tmp/perf-<pid>.map, perf's format for JIT code:
// "<start hex> <size hex> <name>". The name is the label the caller gave (set_label: the backend
// passes the kernel's loop-IR name and iteration space) and the symbol. Without the variable this
// costs one cached getenv per link. Kernels met again in memory keep the label of their first link.
#pragma once
#include <functional>
#include <string>

namespace fastdyn::codegen::llvm_jit {

bool perf_map_enabled();
// The label of the kernels this thread links next ("" clears it).
void set_perf_label(std::string label);
// Records every function symbol of `object` (an ELF object file), resolving each name to its
// linked address with `address_of` (nullptr: skipped).
void perf_map_record(const std::string& object, const std::function<void*(const std::string&)>& address_of);

}  // namespace fastdyn::codegen::llvm_jit
