// runtime/format.h — small text helpers shared by every layer's messages.
//
// NB: no iostreams. fastdyn is loaded into processes whose libstdc++ may be older than the one
// it was compiled against (seen on the accelerator machine: a std::ostringstream in a guard
// message crashed inside the stream's locale code); plain std::string work has no such coupling.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fastdyn {

// "[2, 3, 4]"
inline std::string int_list_str(const int64_t* data, size_t n) {
  std::string out = "[";
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ", ";
    out += std::to_string(data[i]);
  }
  return out + "]";
}
inline std::string int_list_str(const std::vector<int64_t>& v) { return int_list_str(v.data(), v.size()); }

}  // namespace fastdyn
