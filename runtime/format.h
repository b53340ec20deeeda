// runtime/format.h — small text helpers shared by every layer's messages.
//
// NB: no iostreams. fastdyn is loaded into processes whose libstdc++ may be older than the one
// it was compiled against (seen on the accelerator machine: a std::ostringstream in a guard
// message crashed inside the stream's locale code); plain std::string work has no such coupling.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
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

// A string built with stream syntax, for code and dumps that read best as `os << a << b` (the
// loop IR's text, the cuda emitter's source): integers as std::to_string writes them, doubles as
// an ostream would (%g at precision(), 6 by default), no locale and no iostreams.
class Text {
 public:
  Text& operator<<(const std::string& s) { out_ += s; return *this; }
  Text& operator<<(const char* s) { out_ += s; return *this; }
  Text& operator<<(char c) { out_ += c; return *this; }
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, char>, int> = 0>
  Text& operator<<(T v) {
    if constexpr (std::is_same_v<T, bool>)
      out_ += v ? "1" : "0";
    else
      out_ += std::to_string(v);
    return *this;
  }
  Text& operator<<(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", precision_, v);
    out_ += buf;
    return *this;
  }
  void precision(int p) { precision_ = p; }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
  int precision_ = 6;
};

}  // namespace fastdyn
