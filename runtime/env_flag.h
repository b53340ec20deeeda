// runtime/env_flag.h — the words a FASTDYN_* flag reads as off, declared once for every layer
// (eval_hook/config.cpp's settings table validates the values; the lower layers read their own
// flags where they need them, through this).
#pragma once
#include <string_view>

namespace fastdyn::runtime {

// "0", "off", "false", "no" and "" (set but empty).
inline bool is_off_word(std::string_view v) { return v.empty() || v == "0" || v == "off" || v == "false" || v == "no"; }

}  // namespace fastdyn::runtime
