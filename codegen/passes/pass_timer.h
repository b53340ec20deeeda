// codegen/passes/pass_timer.h — FASTDYN_TIME_PASSES=1: wall time of each compile step on stderr.
//
// `PassTimer t; ...; t.lap("lower"); ...; t.lap("fuse");` prints "[fastdyn] pass lower: 0.045 ms"
// per lap (the time since the previous lap) when the variable is set, records it in the report's
// journal (runtime/journal.h) while that is on, and costs one branch when neither is. Used by the loop pipeline, the llvm_cpu backend's graph rewrites and the hook's
// compile-on-miss (trace, guards), so that one run shows where a first call's time goes.
#pragma once
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/env_flag.h"
#include "runtime/journal.h"

namespace fastdyn::codegen {

class PassTimer {
 public:
  PassTimer() : print_(enabled()), on_(print_ || runtime::journal::recording()), t0_(std::chrono::steady_clock::now()) {}
  void lap(const char* pass) {
    if (!on_) return;
    const auto t1 = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(t1 - t0_).count();
    if (print_) std::fprintf(stderr, "[fastdyn] pass %s: %.3f ms\n", pass, ms);
    runtime::journal::add("pass", {{"name", pass}}, ms);  // the report's timings
    t0_ = t1;
  }
  static bool enabled() {
    static const bool on = [] {
      const char* env = std::getenv("FASTDYN_TIME_PASSES");
      return env && !runtime::is_off_word(env);
    }();
    return on;
  }

 private:
  bool print_;
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace fastdyn::codegen
