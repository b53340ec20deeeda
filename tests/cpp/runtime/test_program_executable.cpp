// The program executor (runtime/program_executable.h) and its host kernels
// (runtime/host_kernel.h), alone: C++ functions as kernels, fake executables as extern calls and
// as the aliased fallback. No LLVM, no graph, no Python.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <stdexcept>

#include "runtime/errors.h"
#include "runtime/graph_calls.h"
#include "runtime/host_kernel.h"
#include "runtime/program_executable.h"

namespace fastdyn::runtime {
namespace {

constexpr int64_t kN = 4;  // the fake kernels work on kN floats
int kernel_calls = 0;

// args: a, b, out — out[i] = a[i] + b[i] over sizes[0] elements (kN without size parameters).
// `out` may be `a` (an in-place update).
void add_kernel(void** args, int32_t* /*status*/, const int64_t* sizes) {
  ++kernel_calls;
  const auto* a = static_cast<const float*>(args[0]);
  const auto* b = static_cast<const float*>(args[1]);
  auto* out = static_cast<float*>(args[2]);
  const int64_t n = sizes ? sizes[0] : kN;
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// What an embedding kernel does with an index out of range.
void out_of_range_kernel(void** /*args*/, int32_t* status, const int64_t* /*sizes*/) { *status = 1; }

std::shared_ptr<const Kernel> host(HostKernel::Function fn) {
  return std::make_shared<HostKernel>(fn, nullptr, "llvm_cpu");
}

// An extern ATen call: returns f(inputs); counts its calls; throws when told to.
class FakeExecutable final : public Executable {
 public:
  using Fn = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
  explicit FakeExecutable(Fn fn) : fn_(std::move(fn)) {}
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) override {
    ++calls;
    if (throws) throw std::runtime_error("extern failed");
    return fn_(inputs);
  }
  std::string describe() const override { return "fake\n"; }
  int calls = 0;
  bool throws = false;

 private:
  Fn fn_;
};

at::TensorOptions f32() { return at::TensorOptions().dtype(at::kFloat); }

// The message of the E that f() throws; "" when it throws none.
template <typename E, typename F>
std::string what_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

SlotTensor slot(int32_t s) {
  SlotTensor t;
  t.slot = s;
  return t;
}

// out = (a + b) * 2 through a kernel (slot 2, a buffer) then an extern call (slot 3); outputs:
// slot 3, and a view of slot 2's last two elements as a 2-vector.
Program add_then_double(std::shared_ptr<FakeExecutable> doubler) {
  Program p;
  p.backend = "llvm_cpu";
  p.text = "kernel k0\nextern mul\n";
  p.num_slots = 4;
  p.input_slots = {0, 1};
  p.buffers = {{2, {kN}, {1}, f32()}};
  p.steps.emplace_back(KernelLaunch{host(add_kernel), {0, 1, 2}});
  p.steps.emplace_back(ExternCall{doubler, {slot(2)}, {{3, {kN}, {1}}}});
  p.outputs = {slot(3), {2, /*view=*/true, {2}, {1}, /*offset_delta=*/2}};
  return p;
}

std::shared_ptr<FakeExecutable> doubler() {
  return std::make_shared<FakeExecutable>([](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{in.at(0) * 2}; });
}

// One kernel object in two programs built for different sizes: each launch passes its program's
// size parameters, so the kernel runs at the size of the program that launches it.
TEST(ProgramExecutable, OneKernelServesProgramsOfSeveralSizesThroughItsSizeArguments) {
  auto kernel = host(add_kernel);
  for (int64_t n : {3, 7, 64}) {
    Program p;
    p.backend = "llvm_cpu";
    p.num_slots = 3;
    p.input_slots = {0, 1};
    p.buffers = {{2, {n}, {1}, f32()}};
    p.steps.emplace_back(KernelLaunch{kernel, {0, 1, 2}, {n}});
    p.outputs = {slot(2)};
    ProgramExecutable exe(std::move(p));
    const at::Tensor a = at::arange(n, f32()), b = at::full({n}, 10, f32());
    EXPECT_TRUE(at::equal(exe.run({a, b}).at(0), a + b)) << n;
  }
}

TEST(ProgramExecutable, RunsAKernelThenAnExternCallAndMakesAnAliasOutput) {
  auto extern_call = doubler();
  ProgramExecutable exe(add_then_double(extern_call));
  const at::Tensor a = at::arange(kN, f32()), b = at::full({kN}, 10, f32());
  std::vector<at::Tensor> out = exe.run({a, b});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(at::equal(out[0], (a + b) * 2)) << out[0];
  EXPECT_EQ(extern_call->calls, 1);
  // The alias: elements 2 and 3 of the kernel's buffer, sharing its storage.
  EXPECT_EQ(out[1].sizes(), c10::IntArrayRef({2}));
  EXPECT_EQ(out[1].storage_offset(), 2);
  EXPECT_TRUE(at::equal(out[1], (a + b).slice(0, 2, 4))) << out[1];
}

TEST(ProgramExecutable, BuffersHaveTheProgramsDtypeAndLayout) {
  Program p;
  p.backend = "llvm_cpu";
  p.num_slots = 1;
  p.buffers = {{0, {2, 3}, {1, 2}, at::TensorOptions().dtype(at::kDouble).device(at::kCPU)}};
  p.outputs = {slot(0)};
  std::vector<at::Tensor> out = ProgramExecutable(std::move(p)).run({});
  EXPECT_EQ(out.at(0).scalar_type(), at::kDouble);
  EXPECT_EQ(out[0].device(), at::Device(at::kCPU));
  EXPECT_EQ(out[0].strides(), c10::IntArrayRef({1, 2}));
}

TEST(ProgramExecutable, ConstantsGoInTheirSlots) {
  Program p;
  p.backend = "llvm_cpu";
  p.num_slots = 3;
  p.input_slots = {0};
  p.constants = {{1, at::full({kN}, 5, f32())}};
  p.buffers = {{2, {kN}, {1}, f32()}};
  p.steps.emplace_back(KernelLaunch{host(add_kernel), {0, 1, 2}});
  p.outputs = {slot(2)};
  std::vector<at::Tensor> out = ProgramExecutable(std::move(p)).run({at::ones({kN}, f32())});
  EXPECT_TRUE(at::equal(out.at(0), at::full({kN}, 6, f32()))) << out[0];
}

TEST(ProgramExecutable, AnExternResultWithOtherStridesIsCopiedToTheKernelsLayout) {
  // ATen returns the transpose of a contiguous 2x2 (strides 1, 2); the kernels expect (2, 1).
  auto transposed = std::make_shared<FakeExecutable>(
      [](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{in.at(0).reshape({2, 2}).t().contiguous().t()}; });
  Program p;
  p.backend = "llvm_cpu";
  p.num_slots = 2;
  p.input_slots = {0};
  p.steps.emplace_back(ExternCall{transposed, {slot(0)}, {{1, {2, 2}, {2, 1}}}});
  p.outputs = {slot(1)};
  const at::Tensor x = at::arange(kN, f32());
  std::vector<at::Tensor> out = ProgramExecutable(std::move(p)).run({x});
  EXPECT_EQ(out.at(0).strides(), c10::IntArrayRef({2, 1}));
  EXPECT_TRUE(at::equal(out[0], x.reshape({2, 2}))) << out[0];
}

// a += b in place: the kernel writes slot 0, the caller's tensor; two in-place ops recorded.
Program add_in_place(std::shared_ptr<FakeExecutable> aliased) {
  Program p;
  p.backend = "llvm_cpu";
  p.num_slots = 2;
  p.input_slots = {0, 1};
  p.steps.emplace_back(KernelLaunch{host(add_kernel), {0, 1, 0}});
  p.outputs = {slot(0)};
  p.mutated_inputs = {{0, 2}};
  p.aliased = std::move(aliased);
  return p;
}

std::shared_ptr<FakeExecutable> aliased_marker() {
  return std::make_shared<FakeExecutable>([](const std::vector<at::Tensor>&) { return std::vector<at::Tensor>{at::full({1}, -1.0)}; });
}

TEST(ProgramExecutable, AWriteBackBumpsTheVersionOncePerInPlaceOp) {
  auto aliased = aliased_marker();
  ProgramExecutable exe(add_in_place(aliased));
  at::Tensor a = at::ones({kN}, f32());
  const at::Tensor b = at::full({kN}, 2, f32());
  const auto version = a._version(), b_version = b._version();
  std::vector<at::Tensor> out = exe.run({a, b});
  EXPECT_EQ(aliased->calls, 0);
  EXPECT_TRUE(at::equal(a, at::full({kN}, 3, f32()))) << a;
  EXPECT_TRUE(out.at(0).is_same(a));
  EXPECT_EQ(a._version(), version + 2);
  EXPECT_EQ(b._version(), b_version);
}

TEST(ProgramExecutable, AMutatedInputOverlappingAnotherRunsTheAliasedFallback) {
  auto aliased = aliased_marker();
  ProgramExecutable exe(add_in_place(aliased));
  at::Tensor storage = at::ones({kN + 1}, f32());
  at::Tensor a = storage.slice(0, 0, kN), b = storage.slice(0, 1, kN + 1);  // overlapping
  const int before = kernel_calls;
  std::vector<at::Tensor> out = exe.run({a, b});
  EXPECT_EQ(aliased->calls, 1);
  EXPECT_EQ(kernel_calls, before);
  EXPECT_EQ(out.at(0).item<double>(), -1.0);
  EXPECT_TRUE(at::equal(storage, at::ones({kN + 1}, f32())));  // the steps wrote nothing
  // Disjoint views of one storage are not an overlap: the kernel runs.
  at::Tensor wide = at::ones({2 * kN}, f32());
  exe.run({wide.slice(0, 0, kN), wide.slice(0, kN, 2 * kN)});
  EXPECT_EQ(aliased->calls, 1);
  EXPECT_EQ(kernel_calls, before + 1);
}

TEST(ProgramExecutable, AThrowingStepRunsTheAliasedFallbackWhenInputsAreMutated) {
  auto aliased = aliased_marker();
  auto failing = doubler();
  failing->throws = true;
  Program p = add_in_place(aliased);
  p.steps.insert(p.steps.begin(), ExternCall{failing, {slot(0)}, {ExternResult{}}});  // before the write
  ProgramExecutable exe(std::move(p));
  at::Tensor a = at::ones({kN}, f32());
  const auto version = a._version();
  const int before = kernel_calls;
  std::vector<at::Tensor> out = exe.run({a, at::ones({kN}, f32())});
  EXPECT_EQ(failing->calls, 1);
  EXPECT_EQ(kernel_calls, before);
  EXPECT_EQ(aliased->calls, 1);
  EXPECT_EQ(out.at(0).item<double>(), -1.0);
  EXPECT_TRUE(at::equal(a, at::ones({kN}, f32())));
  EXPECT_EQ(a._version(), version);  // the fallback bumps what it mutates itself
}

// A throwing step of a program that writes its inputs, in a graph call the hook would redo
// (graph_calls.h): the error propagates with the inputs untouched, and no fallback runs.
TEST(ProgramExecutable, AThrowingStepRethrowsWithInputsUntouchedWhenTheCallIsToBeRedone) {
  auto aliased = aliased_marker();
  auto failing = doubler();
  failing->throws = true;
  Program p = add_in_place(aliased);
  p.steps.insert(p.steps.begin(), ExternCall{failing, {slot(0)}, {ExternResult{}}});
  ProgramExecutable exe(std::move(p));
  at::Tensor a = at::ones({kN}, f32());
  const uint64_t call = begin_graph_call();
  const uint64_t outer = redo_if_untouched(call);
  EXPECT_THROW(exe.run({a, at::ones({kN}, f32())}), std::runtime_error);
  redo_if_untouched(outer);
  EXPECT_EQ(failed_untouched_call(), call);
  EXPECT_EQ(aliased->calls, 0);
  EXPECT_TRUE(at::equal(a, at::ones({kN}, f32())));
}

// run_taking: the caller gives up its references, and an input is freed after its last reader
// (a compiled backward's saved activations), while run keeps the caller's.
TEST(ProgramExecutable, RunTakingFreesAnInputAfterItsLastReader) {
  for (const bool taking : {false, true}) {
    c10::weak_intrusive_ptr<c10::TensorImpl> watched(c10::intrusive_ptr<c10::TensorImpl>::reclaim(nullptr));
    bool freed_before_step_1 = false;
    auto probe = std::make_shared<FakeExecutable>([&](const std::vector<at::Tensor>& in) {
      freed_before_step_1 = watched.expired();
      return std::vector<at::Tensor>{in.at(0) * 2};
    });
    Program p = add_then_double(probe);
    p.release_after = {{0}, {}};  // input a's last reader is the kernel, step 0
    ProgramExecutable exe(std::move(p));
    at::Tensor a = at::ones({kN}, f32());
    watched = c10::weak_intrusive_ptr<c10::TensorImpl>(a.getIntrusivePtr());
    std::vector<at::Tensor> inputs{a, at::ones({kN}, f32())};
    a.reset();
    std::vector<at::Tensor> out = taking ? exe.run_taking(std::move(inputs)) : exe.run(inputs);
    EXPECT_EQ(freed_before_step_1, taking);
    EXPECT_TRUE(at::equal(out.at(0), at::full({kN}, 4, f32())));
  }
}

TEST(ProgramExecutable, AThrowingStepPropagatesWhenNoInputIsMutated) {
  auto failing = doubler();
  failing->throws = true;
  ProgramExecutable exe(add_then_double(failing));
  EXPECT_THROW(exe.run({at::ones({kN}, f32()), at::ones({kN}, f32())}), std::runtime_error);
}

TEST(ProgramExecutable, AKernelStatusRaisesIndexOutOfRange) {
  Program p;
  p.backend = "llvm_cpu";
  p.num_slots = 1;
  p.input_slots = {0};
  p.steps.emplace_back(KernelLaunch{host(out_of_range_kernel), {0}});
  p.outputs = {slot(0)};
  ProgramExecutable exe(std::move(p));
  // c10::IndexError, which Python sees as eager's IndexError (the user's op failing, not fastdyn).
  std::string msg;
  try {
    exe.run({at::ones({kN}, f32())});
  } catch (const c10::IndexError& e) {
    msg = e.msg();
  }
  EXPECT_EQ(msg, "llvm_cpu: index out of range in self (embedding / index_select)");
}

TEST(ProgramExecutable, AWrongNumberOfInputsNamesBothCounts) {
  ProgramExecutable exe(add_then_double(doubler()));
  EXPECT_EQ(what_of<UserError>([&] { exe.run({at::ones({kN}, f32())}); }), "llvm_cpu backend: graph takes 2 inputs, got 1");
}

TEST(ProgramExecutable, DescribeIsTheBackendThenItsProgram) {
  EXPECT_EQ(ProgramExecutable(add_then_double(doubler())).describe(), "backend llvm_cpu\nkernel k0\nextern mul\n");
}

TEST(ProgramExecutable, AnInconsistentProgramIsRefusedNamingTheSlot) {
  Program p = add_then_double(doubler());
  std::get<KernelLaunch>(p.steps[0]).args[2] = 7;
  const std::string what = what_of<InternalError>([&] { ProgramExecutable exe(std::move(p)); });
  EXPECT_NE(what.find("a kernel argument names slot 7 of 4"), std::string::npos) << what;
  Program q = add_in_place(nullptr);
  EXPECT_THROW(ProgramExecutable(std::move(q)), InternalError);
}

}  // namespace
}  // namespace fastdyn::runtime
