// codegen/passes/pass_timer.h — FASTDYN_TIME_PASSES=1: wall time of each compile step on stderr.
//
// `PassTimer t; ...; t.lap("lower"); ...; t.lap("fuse");` prints "[fastdyn] pass lower: 0.045 ms"
// per lap (the time since the previous lap) when the variable is set, and costs one branch when
// it is not. Used by the loop pipeline, the llvm_cpu backend's graph rewrites and the hook's
// compile-on-miss (trace, guards), so that one run shows where a first call's time goes.
#pragma once
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace fastdyn::codegen {

class PassTimer {
 public:
  PassTimer() : on_(enabled()), t0_(std::chrono::steady_clock::now()) {}
  void lap(const char* pass) {
    if (!on_) return;
    const auto t1 = std::chrono::steady_clock::now();
    std::fprintf(stderr, "[fastdyn] pass %s: %.3f ms\n", pass, std::chrono::duration<double, std::milli>(t1 - t0_).count());
    t0_ = t1;
  }
  static bool enabled() {
    static const bool on = [] {
      const char* env = std::getenv("FASTDYN_TIME_PASSES");
      return env && *env && std::string(env) != "0" && std::string(env) != "off" && std::string(env) != "false" && std::string(env) != "no";
    }();
    return on;
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace fastdyn::codegen
