// The dynamic executable's bindings (runtime/dynamic_executable.h), with a fake instantiate that
// counts what it builds: no Python, no LLVM.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/dynamic_executable.h"

namespace fastdyn::runtime {
namespace {

// Returns the size it was built for.
class SizeExecutable final : public Executable {
 public:
  explicit SizeExecutable(int64_t n) : n_(n) {}
  std::vector<at::Tensor> run(const std::vector<at::Tensor>&) override { return {at::full({1}, static_cast<double>(n_))}; }
  std::string describe() const override { return "size " + std::to_string(n_) + "\n"; }

 private:
  int64_t n_;
};

struct Counted {
  std::shared_ptr<int> builds = std::make_shared<int>(0);
  DynamicExecutable exe;
  explicit Counted(size_t bound)
      : exe({{0, 0}},
            [b = builds](const std::vector<int64_t>& sizes) {
              ++*b;
              return std::make_shared<SizeExecutable>(sizes.at(0));
            },
            "fake\n", bound) {}
  int64_t call(int64_t n) { return static_cast<int64_t>(exe.run({at::zeros({n})})[0].item<double>()); }
};

TEST(DynamicExecutable, BuildsEachSizeOnceWhileTheyFitTheBound) {
  Counted c(4);
  for (int round = 0; round < 5; ++round)
    for (int64_t n : {3, 7, 9, 12}) EXPECT_EQ(c.call(n), n);
  EXPECT_EQ(*c.builds, 4);
  EXPECT_EQ(c.exe.instantiated(), 4u);
}

TEST(DynamicExecutable, ACycleLongerThanTheBoundKeepsHittingSomeSizes) {
  // A decode loop longer than the bound meets its lengths in order, again at every generate():
  // least-recently-used eviction threw out each length just before its next use (every call a
  // build); the bound's worth of them must keep serving.
  Counted c(8);
  const int rounds = 20, cycle = 12;
  for (int round = 0; round < rounds; ++round)
    for (int64_t n = 2; n < 2 + cycle; ++n) EXPECT_EQ(c.call(n), n);
  const int calls = rounds * cycle;
  EXPECT_LT(*c.builds, calls * 3 / 4) << "builds " << *c.builds << " of " << calls << " calls";
  // The size just built stays (the next call at it hits).
  EXPECT_EQ(c.call(100), 100);
  const int before = *c.builds;
  EXPECT_EQ(c.call(100), 100);
  EXPECT_EQ(*c.builds, before);
}

}  // namespace
}  // namespace fastdyn::runtime
