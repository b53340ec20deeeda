// codegen/cuda/horizontal.cpp — see horizontal.h.
#include "codegen/cuda/horizontal.h"

#include "codegen/loop/interpret.h"
#include "runtime/errors.h"

#include <algorithm>
#include <set>

namespace fastdyn::codegen::cuda_emit {
namespace {

// The program slots a launch reads and writes.
struct Touched {
  std::set<int32_t> reads, writes;
};

Touched touched(const runtime::KernelLaunch& launch, const loop::KernelInput& in) {
  Touched t;
  for (const std::vector<loop::Addr>& stage : in.loads)
    for (const loop::Addr& a : stage) t.reads.insert(launch.args.at(static_cast<size_t>(a.slot)));
  for (const std::vector<loop::Addr>& stage : in.stores)
    for (const loop::Addr& a : stage) t.writes.insert(launch.args.at(static_cast<size_t>(a.slot)));
  return t;
}

bool meets(const std::set<int32_t>& a, const std::set<int32_t>& b) {
  for (int32_t s : a)
    if (b.count(s)) return true;
  return false;
}

// What step i is: an extern call, a host kernel (interpreted: CPU scalars), or a GPU launch.
enum class StepKind { Extern, Host, Gpu };
StepKind step_kind(const std::vector<int32_t>& step_source, const std::vector<CudaSource>& sources, size_t i) {
  if (step_source[i] < 0) return StepKind::Extern;
  return sources[static_cast<size_t>(step_source[i])].on_host ? StepKind::Host : StepKind::Gpu;
}

bool groupable(const CudaSource& s) { return !s.on_host && s.pointwise && s.size_params.empty() && s.split == 0 && s.block == kGroupBlock; }

// Moves step `from` to position `to`, keeping every step's allocations and releases: a buffer
// allocated before step k is still allocated before it (the moved step's own buffers move with it).
void move_step(runtime::Program& r, std::vector<int32_t>& step_source, size_t from, size_t to) {
  if (from == to) return;
  auto move = [&](auto& v) {
    if (std::max(from, to) >= v.size()) return;
    const auto b = v.begin();
    if (to < from) std::rotate(b + static_cast<std::ptrdiff_t>(to), b + static_cast<std::ptrdiff_t>(from), b + static_cast<std::ptrdiff_t>(from) + 1);
    else std::rotate(b + static_cast<std::ptrdiff_t>(from), b + static_cast<std::ptrdiff_t>(from) + 1, b + static_cast<std::ptrdiff_t>(to) + 1);
  };
  move(r.steps);
  move(r.release_after);
  move(step_source);
  for (runtime::Buffer& b : r.buffers) {
    const auto at = static_cast<size_t>(b.alloc_step);
    if (at == from) b.alloc_step = static_cast<int32_t>(to);
    else if (to < from && at >= to && at < from) ++b.alloc_step;
    else if (to > from && at > from && at <= to) --b.alloc_step;
  }
}

// Host kernels (CPU scalars, interpreted) out of the way of the GPU launches around them, so that
// those run one after another and group: a host kernel moves to the start of its run of GPU
// launches when none before it there touches its slots (an Adam step's bias corrections, read by
// the updates after them), else to the run's end when none after it does (the step counts'
// increments, after the updates that read the old counts). A launch reads CPU scalars when it
// is made, so a host kernel never passes one that reads (or shares a reused slot with) what it
// writes; nor does it pass an extern call or another host kernel.
void move_host_kernels(runtime::Program& r, std::vector<int32_t>& step_source, const std::vector<CudaSource>& sources) {
  auto gpu_launch = [&](size_t i) { return step_kind(step_source, sources, i) == StepKind::Gpu; };
  auto host = [&](size_t i) { return step_kind(step_source, sources, i) == StepKind::Host; };
  auto disjoint = [&](size_t i, size_t j) {  // steps i and j touch no slot in common
    const auto& a = std::get<runtime::KernelLaunch>(r.steps[i]).args;
    const auto& b = std::get<runtime::KernelLaunch>(r.steps[j]).args;
    return !meets(std::set<int32_t>(a.begin(), a.end()), std::set<int32_t>(b.begin(), b.end()));
  };
  for (size_t i = 0; i < r.steps.size(); ++i) {
    if (!host(i)) continue;
    size_t to = i;
    while (to > 0 && gpu_launch(to - 1) && disjoint(to - 1, i)) --to;
    if (to < i && !(to > 0 && gpu_launch(to - 1))) move_step(r, step_source, i, to);
  }
  for (size_t i = r.steps.size(); i-- > 0;) {
    if (!host(i)) continue;
    size_t to = i;
    while (to + 1 < r.steps.size() && gpu_launch(to + 1) && disjoint(to + 1, i)) ++to;
    if (to > i && !(to + 1 < r.steps.size() && gpu_launch(to + 1))) move_step(r, step_source, i, to);
  }
}

}  // namespace

std::string fuse_horizontally(runtime::Program& r, std::vector<int32_t>& step_source, std::vector<CudaSource>& sources,
                              const std::vector<loop::KernelInput>& inputs) {
  FD_CHECK(step_source.size() == r.steps.size(), "horizontal fusion: a source per step");
  move_host_kernels(r, step_source, sources);
  // Runs [first, end) of steps, greedily: a launch joins the open run when it may.
  std::vector<std::pair<size_t, size_t>> runs;
  Touched open;
  int open_args = 0;
  size_t first = 0;
  auto close = [&](size_t end) {
    if (end - first >= 2) runs.emplace_back(first, end);
    open = {};
    open_args = 0;
    first = end;
  };
  auto on_host = [&](size_t i) { return step_kind(step_source, sources, i) == StepKind::Host; };
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const int32_t src = step_source[i];
    // Host kernels run in order: any that follow each other are one step.
    if (on_host(i)) {
      if (i > first && !on_host(first)) close(i);
      continue;
    }
    if (i > first && on_host(first)) close(i);
    if (src < 0 || !groupable(sources[static_cast<size_t>(src)])) {
      close(i);
      first = i + 1;
      continue;
    }
    const auto& launch = std::get<runtime::KernelLaunch>(r.steps[i]);
    Touched t = touched(launch, inputs[static_cast<size_t>(src)]);
    const int args = static_cast<int>(launch.args.size() + sources[static_cast<size_t>(src)].host_values.size());
    if (i > first && (meets(t.writes, open.reads) || meets(t.writes, open.writes) || meets(t.reads, open.writes) ||
                      open_args + args > kMaxGroupArgs))
      close(i);
    open.reads.insert(t.reads.begin(), t.reads.end());
    open.writes.insert(t.writes.begin(), t.writes.end());
    open_args += args;
  }
  close(r.steps.size());
  if (runs.empty()) return "";

  // The rewrite: each run one step; the steps' allocations and releases follow.
  std::string text;
  std::vector<runtime::Step> steps;
  std::vector<std::vector<int32_t>> release;
  std::vector<int32_t> new_source;
  std::vector<int32_t> new_index(r.steps.size());
  size_t next_run = 0;
  for (size_t i = 0; i < r.steps.size();) {
    const bool grouped = next_run < runs.size() && runs[next_run].first == i;
    const size_t end = grouped ? runs[next_run].second : i + 1;
    const auto index = static_cast<int32_t>(steps.size());
    std::vector<int32_t> released;
    for (size_t j = i; j < end; ++j) {
      new_index[j] = index;
      if (j < r.release_after.size()) released.insert(released.end(), r.release_after[j].begin(), r.release_after[j].end());
    }
    if (grouped) {
      // Host kernels run in order as one interpreted kernel; GPU launches as one group kernel.
      const bool host_run = on_host(i);
      runtime::KernelLaunch launch;
      std::vector<const loop::InterpretedKernel*> interpreted;
      std::vector<loop::KernelInput> members;
      for (size_t j = i; j < end; ++j) {
        const auto& member = std::get<runtime::KernelLaunch>(r.steps[j]);
        launch.args.insert(launch.args.end(), member.args.begin(), member.args.end());
        if (!host_run) {
          members.push_back(inputs[static_cast<size_t>(step_source[j])]);
          continue;
        }
        const auto* kernel = dynamic_cast<const loop::InterpretedKernel*>(member.kernel.get());
        FD_CHECK(kernel && kernel->num_args() == static_cast<int32_t>(member.args.size()),
                 "horizontal fusion: a host step without its interpreted kernel");
        interpreted.push_back(kernel);
      }
      text += (host_run ? "host k" : "group k") + std::to_string(sources.size()) + ": steps " + std::to_string(i) + ".." +
              std::to_string(end - 1) + (host_run ? " run as one\n" : " launch as one\n");
      if (host_run) {
        launch.kernel = std::make_shared<loop::InterpretedKernel>(interpreted);
        sources.emplace_back().on_host = true;
      } else {
        sources.push_back(emit_cuda_group(members));
      }
      new_source.push_back(static_cast<int32_t>(sources.size() - 1));
      steps.emplace_back(std::move(launch));
      ++next_run;
    } else {
      new_source.push_back(step_source[i]);
      steps.push_back(std::move(r.steps[i]));
    }
    release.push_back(std::move(released));
    i = end;
  }
  for (runtime::Buffer& b : r.buffers)
    if (b.alloc_step >= 0 && static_cast<size_t>(b.alloc_step) < new_index.size()) b.alloc_step = new_index[static_cast<size_t>(b.alloc_step)];
  r.steps = std::move(steps);
  r.release_after = std::move(release);
  step_source = std::move(new_source);
  return text;
}

}  // namespace fastdyn::codegen::cuda_emit
