// runtime/env_flag.h — how a FASTDYN_* flag or count reads, declared once for every layer
// (eval_hook/config.cpp's settings table validates the values; the lower layers read their own
// flags where they need them, through this).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace fastdyn::runtime {

// "0", "off", "false", "no" and "" (set but empty).
inline bool is_off_word(std::string_view v) { return v.empty() || v == "0" || v == "off" || v == "false" || v == "no"; }

// The positive integer in environment variable `name` (a FASTDYN_* count: the settings table
// checks its value at import), or 0 when unset or not one.
inline int64_t env_count(const char* name) {
  const char* text = std::getenv(name);
  if (!text || !*text) return 0;
  char* end = nullptr;
  const long long n = std::strtoll(text, &end, 10);
  return *end == '\0' && n > 0 ? static_cast<int64_t>(n) : 0;
}

}  // namespace fastdyn::runtime
