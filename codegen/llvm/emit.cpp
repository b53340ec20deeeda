// codegen/llvm/emit.cpp — emit_program: loop IR kernels as LLVM IR (see emit.h for the ABI).
//
// Structure per kernel: <name>(slots, status) packs its arguments and calls fastdyn_parallel_for
// with <name>.body(ctx, begin, end); the body turns each task number into an outer point, computes
// each access's base element offset there, and runs the stages. Loop counters and accumulators
// live in allocas (the engine's O3 pipeline promotes them to registers), which keeps the emitter
// free of phi bookkeeping. One code path emits an instr for any lane count: 1 is the scalar tail
// and per-outer stages, the host width is the vector body.
//
// This file holds the public functions, the host facts and access addresses a kernel is planned
// from, and KernelEmitter's setup: dims collapsed, modes chosen (row / column / streaming; split
// mode in emit_stages.cpp), the body and entry functions, loops, and the per-task code. The inner
// stages are in emit_stages.cpp, one point's code in emit_point.cpp (see emit_kernel.h).
#include "codegen/llvm/emit.h"

#include "codegen/llvm/emit_kernel.h"
#include "runtime/errors.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>
#include <llvm/TargetParser/Triple.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

namespace fastdyn::codegen::llvm_emit {
namespace detail {
namespace {

using shapes::SizeExpr;

// The last-level cache in bytes: sysfs (what the kernel reports for this CPU), else sysconf (NB:
// glibc's figure is ten times too large under some hypervisors, hence second), else 32 MiB.
int64_t last_level_cache_bytes() {
  static const int64_t bytes = [] {
    int64_t best = 0;
    for (int index = 0; index < 8; ++index) {
      std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
      std::string text;
      if (!(f >> text) || text.empty()) continue;
      int64_t v = std::atoll(text.c_str());
      const char unit = text.back();
      v *= unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : 1;
      best = std::max(best, v);
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (best <= 0) best = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    return best > 0 ? best : int64_t{32} << 20;
  }();
  return bytes;
}

// A kernel that writes a contiguous output larger than the last-level cache stores it with
// non-temporal (streaming) stores: the lines would be evicted before anyone reads them anyway, and
// streaming skips reading each destination line into the cache first (as memcpy does for big
// copies), which cuts the memory traffic of a copy by a third.
// NB: the host's cache size is not part of the kernel-cache key; a cached kernel from a machine
// with the same CPU and a different cache only streams at a slightly different size.
// NB: capped at 32 MiB: a VM is told the whole host's last-level cache (seen here: 260 MiB on a
// 2-core VM, where a 64 MiB output then did not stream), while its share, and the cache one
// core complex of today's x86 parts has, is at most a few tens of MiB.
int64_t streaming_store_threshold_bytes() { return std::min(last_level_cache_bytes(), int64_t{32} << 20); }

}  // namespace

void KernelEmitter::plan() {
  if (planned_) return;
  prepare();
  forget_symbolic_numbers();
  planned_ = true;
}

// After the decisions, a number with a size expression is only ever computed at run time from the
// expression (size()): forgetting it makes the rest of emission the same at every size where the
// decisions were, and plan_key() then names the module without any size's numbers in it.
void KernelEmitter::forget_symbolic_numbers() {
  for (size_t l = 0; l < loop_size_.size(); ++l)
    if (!loop_sym_[l].is_constant()) {
      loop_size_[l] = kForgotten;
      if (l >= n_outer_) inner_numel_ = kForgotten;
    }
  for (auto* addrs : {&load_addr_, &store_addr_})
    for (std::vector<Addr>& stage : *addrs)
      for (Addr& a : stage) {
        for (size_t d = 0; d < a.stride.size(); ++d)
          if (!a.sym_stride[d].is_constant()) a.stride[d] = kForgotten;
        if (!a.sym_base.is_constant()) a.base = kForgotten;
        if (!a.sym_dyn_stride.is_constant()) a.dyn_stride = kForgotten;
        if (!a.sym_dyn_size.is_constant()) a.dyn_size = kForgotten;
      }
}

void KernelEmitter::emit() {
  plan();
  if (split_) {
    emit_split();
    return;
  }
  // The body: its tasks are outer points (pure pointwise kernels: blocks of a row).
  begin_body(symbol_ + ".body");
  if (ranged_) {
    // This thread's vectors [begin, end) of the row: its points [begin * vf, min(end * vf, n)).
    llvm::Value* hi = b_.CreateMul(body_->getArg(2), b_.getInt64(vf_));
    split_lo_ = b_.CreateMul(body_->getArg(1), b_.getInt64(vf_));
    split_hi_ = b_.CreateSelect(b_.CreateICmpSLT(hi, loop_len(0)), hi, loop_len(0));
    run_stages({}, b_.getInt64(0), 0);
    split_lo_ = split_hi_ = nullptr;
  } else {
    for_loop(body_->getArg(1), body_->getArg(2), b_.getInt64(1), [&](llvm::Value* task) { emit_task(task); });
  }
  // Streaming stores are weakly ordered: fence them before this thread's chunk counts as done.
  if (nt_store_ >= 0 && llvm::Triple(m_.getTargetTriple()).isX86())
    b_.CreateCall(llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::x86_sse_sfence));
  b_.CreateRetVoid();
  // The entry point: (slots, status, sizes) become the body's ctx.
  llvm::Function* f = begin_entry();
  auto* ptr = llvm::PointerType::get(ctx_, 0);
  llvm::Value* pack = b_.CreateAlloca(ptr, b_.getInt64(3));
  for (unsigned i = 0; i < 3; ++i) b_.CreateStore(f->getArg(i), b_.CreateGEP(ptr, pack, {b_.getInt64(i)}));
  b_.CreateCall(parallel_work(), {tasks_v(), work_v(), body_, pack});
  b_.CreateRetVoid();
}

// Makes f the function being emitted: its first block holds the size computations (size()) and
// branches to the block "entry", where the builder is left.
void KernelEmitter::begin_function(llvm::Function* f) {
  fn_ = f;
  size_block_ = llvm::BasicBlock::Create(ctx_, "sizes", f);
  auto* entry = llvm::BasicBlock::Create(ctx_, "entry", f);
  llvm::BranchInst::Create(entry, size_block_);
  size_cache_.clear();
  b_.SetInsertPoint(entry);
}

llvm::Value* KernelEmitter::size(const SizeExpr& e, int64_t value) {
  if (e.is_constant()) return b_.getInt64(value);
  FD_CHECK(value == kForgotten || !planned_, "llvm emitter: a symbolic number was not forgotten");
  const std::string text = e.str();
  if (auto it = size_cache_.find(text); it != size_cache_.end()) return it->second;
  const std::vector<SizeExpr::TermView> terms = e.terms();
  llvm::IRBuilder<> sb(size_block_->getTerminator());
  auto* i64 = sb.getInt64Ty();
  auto param = [&](shapes::SymbolId s) -> llvm::Value* {
    auto pos = std::find(params_.begin(), params_.end(), s);
    if (pos == params_.end()) pos = params_.insert(params_.end(), s);
    const std::string key = "$" + std::to_string(s);
    if (auto it = size_cache_.find(key); it != size_cache_.end()) return it->second;
    llvm::LoadInst* v = sb.CreateLoad(i64, sb.CreateGEP(i64, sizes_, {sb.getInt64(pos - params_.begin())}));
    v->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx_, {}));
    return size_cache_[key] = v;
  };
  llvm::Value* total = nullptr;
  for (const SizeExpr::TermView& t : terms) {
    llvm::Value* term = nullptr;
    for (const auto& [atom, exponent] : t.atoms)
      for (int i = 0; i < exponent; ++i) term = term ? sb.CreateMul(term, param(atom->symbol)) : param(atom->symbol);
    term = !term ? sb.getInt64(t.coef) : t.coef == 1 ? term : sb.CreateMul(term, sb.getInt64(t.coef));
    total = total ? sb.CreateAdd(total, term) : term;
  }
  return size_cache_[text] = total;
}

// ceil(n / k), n >= 0.
llvm::Value* KernelEmitter::ceil_div(llvm::Value* n, int64_t k) {
  return b_.CreateUDiv(b_.CreateAdd(n, b_.getInt64(k - 1)), b_.getInt64(k));
}

// Pure pointwise: the blocks a row is cut into (1 unless blocked_).
llvm::Value* KernelEmitter::blocks_v() { return blocked_ ? ceil_div(loop_len(loop_size_.size() - 1), kRowBlock) : b_.getInt64(1); }

// Column mode: the tasks along the lane loop (groups of col_width_ of its points).
llvm::Value* KernelEmitter::col_groups_v() { return ceil_div(loop_len(n_outer_ - 1), col_width_); }

// Tasks of the parallel loop: outer points (column mode: groups of the lane loop) times blocks.
llvm::Value* KernelEmitter::tasks_v() {
  if (split_) return b_.getInt64(split_chunks_);
  if (ranged_) return ceil_div(loop_len(0), vf_);
  if (pure_ && !blocked_ && inner_numel_ == 0) return b_.getInt64(0);
  llvm::Value* t = b_.getInt64(1);
  for (size_t l = 0; l < n_outer_; ++l) {
    t = b_.CreateMul(t, column_ && l + 1 == n_outer_ ? col_groups_v() : loop_len(l));
  }
  return b_.CreateMul(t, blocks_v());
}

// Elements of work per task; the runtime turns it into tasks per thread (fastdyn_grain_for), so
// that small work stays on the calling thread.
llvm::Value* KernelEmitter::work_v() {
  auto min = [&](llvm::Value* x, llvm::Value* y) { return b_.CreateSelect(b_.CreateICmpSLT(x, y), x, y); };
  if (ranged_) return b_.getInt64(vf_);
  llvm::Value* work = b_.getInt64(1);
  if (pure_) {
    if (loop_size_.size() > n_outer_) work = min(loop_len(loop_size_.size() - 1), b_.getInt64(kRowBlock));
  } else {
    for (size_t l = n_outer_; l < loop_size_.size(); ++l) work = b_.CreateMul(work, loop_len(l));
    work = b_.CreateMul(work, b_.getInt64(static_cast<int64_t>(k_.stages.size())));
  }
  if (column_) work = b_.CreateMul(work, b_.getInt64(col_width_));
  return work;
}

// A parallel body `void name(ctx, begin, end)`, internal to the module: becomes body_ and fn_, and
// leaves the builder in its entry block with slots_, status_ and sizes_ loaded from ctx[0..2].
llvm::Function* KernelEmitter::begin_body(const std::string& name) {
  auto* ptr = llvm::PointerType::get(ctx_, 0);
  auto* i64 = b_.getInt64Ty();
  auto* body_ty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, i64, i64}, false);
  body_ = llvm::Function::Create(body_ty, llvm::Function::InternalLinkage, name, m_);
  begin_function(body_);
  llvm::Value* ctxp = body_->getArg(0);
  slots_ = b_.CreateLoad(ptr, ctxp);
  status_ = b_.CreateLoad(ptr, b_.CreateGEP(ptr, ctxp, {b_.getInt64(1)}));
  llvm::IRBuilder<> sb(size_block_->getTerminator());
  sizes_ = sb.CreateLoad(ptr, sb.CreateGEP(ptr, ctxp, {sb.getInt64(2)}));
  return body_;
}

// The kernel's entry point `void symbol(slots, status, sizes)` (see emit.h): becomes fn_, and
// leaves the builder in its entry block.
llvm::Function* KernelEmitter::begin_entry() {
  auto* ptr = llvm::PointerType::get(ctx_, 0);
  auto* fn_ty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr, ptr}, false);
  auto* f = llvm::Function::Create(fn_ty, llvm::Function::ExternalLinkage, symbol_, m_);
  begin_function(f);
  sizes_ = f->getArg(2);
  return f;
}

// The runtime's fastdyn_parallel_for(tasks, grain, body, ctx) and fastdyn_parallel_work(tasks,
// work per task, body, ctx) (runtime/parallel.h).
llvm::FunctionCallee KernelEmitter::parallel_for() { return runtime_loop("fastdyn_parallel_for"); }
llvm::FunctionCallee KernelEmitter::parallel_work() { return runtime_loop("fastdyn_parallel_work"); }
llvm::FunctionCallee KernelEmitter::runtime_loop(const char* name) {
  auto* ptr = llvm::PointerType::get(ctx_, 0);
  auto* i64 = b_.getInt64Ty();
  auto* pf_ty = llvm::FunctionType::get(b_.getVoidTy(), {i64, i64, ptr, ptr}, false);
  return m_.getOrInsertFunction(name, pf_ty);
}

// The loop dims after merging neighbours that every access walks contiguously, and the task
// layout. Pure pointwise kernels treat all dims alike (a contiguous tensor becomes one row).
void KernelEmitter::prepare() {
  load_addr_ = in_.loads;
  store_addr_ = in_.stores;
  pure_ = k_.stages.size() == 1 && !k_.stages[0].per_outer && k_.stages[0].reductions.empty() &&
          !loop::has_scan(k_.stages[0]);
  std::vector<int64_t> sizes = k_.outer;
  sizes.insert(sizes.end(), k_.inner.begin(), k_.inner.end());
  std::vector<std::vector<int32_t>> groups;  // kernel dims per loop dim
  n_outer_ = 0;
  auto all_addrs = [&](const std::function<bool(const Addr&)>& f) {
    for (auto& v : load_addr_) for (const Addr& a : v) if (!f(a)) return false;
    for (auto& v : store_addr_) for (const Addr& a : v) if (!f(a)) return false;
    return true;
  };
  const size_t no = k_.outer.size();
  // Loops in the kernel's dim order: fusion already put a pointwise kernel's dims in its output's
  // memory order (codegen/loop/fusion.cpp build_store), so a transposed output is written along
  // its contiguous dim.
  for (size_t d = 0; d < sizes.size(); ++d) {
    bool boundary = d == no && !pure_;  // outer and inner never merge unless pure pointwise
    if (!groups.empty() && !boundary) {
      int32_t prev = groups.back().back();
      int64_t inner_size = sizes[d];
      bool ok = all_addrs([&](const Addr& a) {
        return a.stride[static_cast<size_t>(prev)] == a.stride[d] * inner_size;
      });
      if (ok) {
        groups.back().push_back(static_cast<int32_t>(d));
        continue;
      }
    }
    groups.push_back({static_cast<int32_t>(d)});
  }
  if (!pure_) {
    n_outer_ = 0;
    for (auto& grp : groups) if (grp[0] < static_cast<int32_t>(no)) ++n_outer_;
  } else {
    n_outer_ = groups.empty() ? 0 : groups.size() - 1;  // the last merged dim is the row
  }
  const std::vector<SizeExpr> dim_sym = loop::domain_exprs(in_);
  for (auto& grp : groups) {
    int64_t size = 1;
    SizeExpr sym = 1;
    for (int32_t d : grp) {
      size *= sizes[static_cast<size_t>(d)];
      sym = sym * dim_sym[static_cast<size_t>(d)];
    }
    loop_size_.push_back(size);
    loop_sym_.push_back(sym);
    loop_dim_.push_back(grp.back());  // the innermost kernel dim carries the stride
  }
  inner_numel_ = 1;
  for (size_t l = n_outer_; l < loop_size_.size(); ++l) inner_numel_ *= loop_size_[l];
  // Rows longer than a block are cut into blocks; so is a row of symbolic length, always (one
  // block when short): the same code then serves every length.
  blocked_ = pure_ && loop_size_.size() > n_outer_ && (loop_size_.back() > kRowBlock || !loop_sym_.back().is_constant());
  // The task count and work are code (tasks_v, work_v): with symbolic sizes they are too.
  choose_column_mode();
  choose_streaming_store();
  choose_split_mode();
  // One row of symbolic length whose remainder is a masked step: a thread's share of it is one
  // loop over a range of its vectors (the tasks), not blocks of kRowBlock points cut by a loop
  // around the row loop. Two nested loops with size-dependent bounds cost LLVM's loop passes and
  // instruction selection a third more than the one (pointwise kernels compiled 1.4x slower than
  // with static sizes, where both loops fold to constants).
  ranged_ = blocked_ && n_outer_ == 0 && loop_size_.size() == 1 && !loop_sym_[0].is_constant() && nt_store_ < 0 &&
            masked_remainder(0, 0);
  if (ranged_) blocked_ = false;
}

// Row mode (the default) vectorises along the innermost loop. Column mode vectorises along the
// innermost outer loop instead, when that is where the memory is contiguous: x.sum(0) on a
// row-major matrix then loads whole vectors of a row and keeps one accumulator per output lane,
// where row mode would gather one element per lane with the row stride. Accesses are weighted
// by how often they run (inner stages: every inner point; per-outer stages: once).
void KernelEmitter::choose_column_mode() {
  column_ = false;
  if (pure_ || vf_ <= 1 || n_outer_ == 0 || loop_size_.size() == n_outer_) return;
  const size_t lane = n_outer_ - 1, last = loop_size_.size() - 1;
  if (loop_size_[lane] < vf_) return;
  int64_t col = 0, row = 0;
  for (size_t s = 0; s < k_.stages.size(); ++s) {
    const int64_t weight = k_.stages[s].per_outer ? 1 : inner_numel_;
    for (const auto* addrs : {&load_addr_[s], &store_addr_[s]})
      for (const Addr& a : *addrs) {
        if (a.dynamic >= 0) continue;
        if (stride(a, lane) == 1) col += weight;
        if (!k_.stages[s].per_outer && stride(a, last) == 1) row += weight;
      }
  }
  if (col <= row) return;
  column_ = true;
  col_width_ = loop_size_[lane] >= vf_ * kColumnVectors ? vf_ * kColumnVectors : vf_;
}

// The store of a pure pointwise kernel that streams (see streaming_store_threshold_bytes): the
// first one that is contiguous along the row and whose value is larger than the cache.
void KernelEmitter::choose_streaming_store() {
  nt_store_ = -1;
  if (!pure_ || vf_ <= 1 || loop_size_.size() <= n_outer_) return;
  const size_t row = loop_size_.size() - 1;
  for (size_t w = 0; w < store_addr_[0].size(); ++w) {
    const Addr& a = store_addr_[0][w];
    const int64_t bytes = in_.store_bytes[w];
    if (a.dynamic >= 0 || stride(a, row) != 1 || bytes < streaming_store_threshold_bytes()) continue;
    nt_store_ = static_cast<int32_t>(w);
    nt_align_ = std::min<int64_t>(64, static_cast<int64_t>(vf_) * static_cast<int64_t>(c10::elementSize(a.storage)));
    return;
  }
}

void KernelEmitter::for_loop(llvm::Value* lo, llvm::Value* hi, llvm::Value* step, const std::function<void(llvm::Value*)>& body) {
  // NB: with static shapes most bounds are constants here (the builder folds them): a loop that
  // never runs is not emitted, so the unrolled body, the single-vector loop and the scalar tail
  // exist only where they run. LLVM's time grows with the IR we hand it.
  auto* clo = llvm::dyn_cast<llvm::ConstantInt>(lo);
  auto* chi = llvm::dyn_cast<llvm::ConstantInt>(hi);
  if (clo && chi && clo->getSExtValue() >= chi->getSExtValue()) return;
  llvm::Value* var = entry_alloca(b_.getInt64Ty());
  b_.CreateStore(lo, var);
  auto* cond = llvm::BasicBlock::Create(ctx_, "loop.cond", fn_);
  auto* bodyb = llvm::BasicBlock::Create(ctx_, "loop.body", fn_);
  auto* exit = llvm::BasicBlock::Create(ctx_, "loop.exit", fn_);
  b_.CreateBr(cond);
  b_.SetInsertPoint(cond);
  llvm::Value* i = b_.CreateLoad(b_.getInt64Ty(), var);
  b_.CreateCondBr(b_.CreateICmpSLT(i, hi), bodyb, exit);
  b_.SetInsertPoint(bodyb);
  body(i);
  // NB: body() may have moved the insert point into its own exit block; we continue there.
  b_.CreateStore(b_.CreateAdd(i, step), var);
  b_.CreateBr(cond);
  b_.SetInsertPoint(exit);
}

void KernelEmitter::if_then(llvm::Value* cond, const std::function<void()>& body) {
  auto* then = llvm::BasicBlock::Create(ctx_, "if.then", fn_);
  auto* merge = llvm::BasicBlock::Create(ctx_, "if.end", fn_);
  b_.CreateCondBr(cond, then, merge);
  b_.SetInsertPoint(then);
  body();
  b_.CreateBr(merge);
  b_.SetInsertPoint(merge);
}

llvm::Value* KernelEmitter::entry_alloca(llvm::Type* t) {
  llvm::IRBuilder<> e(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
  return e.CreateAlloca(t);
}

void KernelEmitter::emit_task(llvm::Value* task) {
  // The task's coordinates, fastest first: the block of a row, the column group, then the outer
  // loops innermost first (tasks_v is their product). The slowest one is what is left of the task:
  // it needs no remainder and nothing divides by it (each 64-bit division by a size symbol is a
  // fast and a slow path in the machine code, compile time that dynamic kernels paid for nothing).
  llvm::Value* o = task;
  size_t left = (blocked_ ? 1 : 0) + n_outer_;
  auto take = [&](llvm::Value* radix) {
    if (--left == 0) return o;
    llvm::Value* c = b_.CreateURem(o, radix);
    o = b_.CreateUDiv(o, radix);
    return c;
  };
  llvm::Value* block = blocked_ ? take(blocks_v()) : b_.getInt64(0);
  llvm::Value* group = nullptr;
  const size_t lane = n_outer_ - 1;
  llvm::Value* lane_size = column_ ? loop_len(lane) : nullptr;
  if (column_) group = take(col_groups_v());
  // Outer multi-index, innermost fastest (column mode: the lane loop's first point of the group).
  std::vector<llvm::Value*> oidx(n_outer_);
  for (size_t l = n_outer_; l-- > 0;) {
    if (column_ && l + 1 == n_outer_) {
      oidx[l] = b_.CreateMul(group, b_.getInt64(col_width_));
      continue;
    }
    oidx[l] = take(loop_len(l));
  }
  if (!column_) {
    run_stages(oidx, block, 0);
    return;
  }
  if (llvm::isa<llvm::ConstantInt>(lane_size) && loop_size_[lane] % col_width_ == 0) {
    run_stages(oidx, nullptr, static_cast<int>(col_width_));
    return;
  }
  // Only the last group is partial: whole vectors, then single points.
  llvm::Value* j0 = oidx[lane];
  auto* full = llvm::BasicBlock::Create(ctx_, "group.full", fn_);
  auto* part = llvm::BasicBlock::Create(ctx_, "group.part", fn_);
  auto* done = llvm::BasicBlock::Create(ctx_, "group.done", fn_);
  b_.CreateCondBr(b_.CreateICmpSLE(b_.CreateAdd(j0, b_.getInt64(col_width_)), lane_size), full, part);
  b_.SetInsertPoint(full);
  run_stages(oidx, nullptr, static_cast<int>(col_width_));
  b_.CreateBr(done);
  b_.SetInsertPoint(part);
  llvm::Value* rest = b_.CreateSub(lane_size, j0);
  llvm::Value* vec_end = b_.CreateAdd(j0, b_.CreateMul(b_.CreateSDiv(rest, b_.getInt64(vf_)), b_.getInt64(vf_)));
  if (col_width_ > vf_)
    for_loop(j0, vec_end, b_.getInt64(vf_), [&](llvm::Value* j) {
      oidx[lane] = j;
      run_stages(oidx, nullptr, vf_);
    });
  for_loop(vec_end, lane_size, b_.getInt64(1), [&](llvm::Value* j) {
    oidx[lane] = j;
    run_stages(oidx, nullptr, 1);
  });
  b_.CreateBr(done);
  b_.SetInsertPoint(done);
}

// Every stage at one outer point (column mode: `col_lanes` consecutive points of the lane loop).
void KernelEmitter::run_stages(const std::vector<llvm::Value*>& oidx, llvm::Value* block, int col_lanes) {
  compute_bases(oidx);
  reduced_.clear();
  stage_values_.assign(k_.stages.size(), {});
  for (size_t s = 0; s < k_.stages.size(); ++s) {
    if (k_.stages[s].per_outer) {
      run_point(s, column_ ? col_lanes : 1, {}, nullptr);
    } else {
      emit_inner_stage(s, block, col_lanes);
    }
  }
}

// Base element offsets of every access at this outer point.
void KernelEmitter::compute_bases(const std::vector<llvm::Value*>& oidx) {
  auto bases = [&](std::vector<std::vector<Addr>>& addrs, std::vector<std::vector<llvm::Value*>>& out) {
    out.clear();
    for (auto& v : addrs) {
      std::vector<llvm::Value*> row;
      for (const Addr& a : v) {
        llvm::Value* off = size(a.sym_base, a.base);
        for (size_t l = 0; l < n_outer_; ++l)
          if (stride(a, l) != 0) off = b_.CreateAdd(off, b_.CreateMul(oidx[l], stride_v(a, l)));
        row.push_back(off);
      }
      out.push_back(row);
    }
  };
  bases(load_addr_, load_base_);
  bases(store_addr_, store_base_);
}

}  // namespace detail

namespace {

// Appends raw bytes of integers, and expressions as their canonical text with its length: an
// unambiguous encoding.
struct KeyWriter {
  std::string out;
  void i64(int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void f64(double v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void ints(const std::vector<int64_t>& v) {
    i64(static_cast<int64_t>(v.size()));
    for (int64_t x : v) i64(x);
  }
  void expr(const shapes::SizeExpr& e) {
    if (e.is_constant()) {
      i64(0);
      return;  // its number is written next to it
    }
    const std::string t = e.str();
    i64(static_cast<int64_t>(t.size()) + 1);
    out += t;
  }
  void addr(const Addr& a) {
    i64(a.slot);
    i64(static_cast<int64_t>(a.storage));
    i64(a.base);
    expr(a.sym_base);
    i64(static_cast<int64_t>(a.stride.size()));
    for (size_t d = 0; d < a.stride.size(); ++d) {
      i64(a.stride[d]);
      expr(a.sym_stride[d]);
    }
    i64(a.dynamic);
    i64(a.dyn_stride);
    expr(a.sym_dyn_stride);
    i64(a.dyn_size);
    expr(a.sym_dyn_size);
  }
};

}  // namespace

namespace detail {

std::string KernelEmitter::plan_key() {
  plan();
  KeyWriter w;
  w.i64(vf_);
  w.i64(masked_tail_);
  w.i64(pure_);
  w.i64(static_cast<int64_t>(n_outer_));
  w.i64(static_cast<int64_t>(loop_size_.size()));
  for (size_t l = 0; l < loop_size_.size(); ++l) {
    w.i64(loop_dim_[l]);
    w.i64(loop_size_[l]);
    w.expr(loop_sym_[l]);
  }
  w.i64(inner_numel_);
  w.i64(blocked_);
  w.i64(ranged_);
  w.i64(column_);
  w.i64(col_width_);
  w.i64(nt_store_);
  w.i64(nt_align_);
  w.i64(split_);
  w.i64(split_chunks_);
  // A count over loops of symbolic length is computed from them (instr()): its number is one size's.
  bool symbolic_count = false;
  for (size_t l = n_outer_; l < loop_sym_.size(); ++l) symbolic_count = symbolic_count || !loop_sym_[l].is_constant();
  w.i64(static_cast<int64_t>(k_.stages.size()));
  for (size_t s = 0; s < k_.stages.size(); ++s) {
    const Stage& st = k_.stages[s];
    w.i64(st.per_outer);
    w.i64(static_cast<int64_t>(st.instrs.size()));
    for (const Instr& i : st.instrs) {
      w.i64(static_cast<int64_t>(i.op));
      w.i64(static_cast<int64_t>(i.type));
      w.i64(i.a);
      w.i64(i.b);
      w.i64(i.c);
      w.f64(i.op == Op::Count && symbolic_count ? 0.0 : i.value);
    }
    w.i64(static_cast<int64_t>(load_addr_[s].size()));
    for (const Addr& a : load_addr_[s]) w.addr(a);
    w.i64(static_cast<int64_t>(st.stores.size()));
    for (size_t x = 0; x < st.stores.size(); ++x) {
      w.i64(st.stores[x].instr);
      w.addr(store_addr_[s][x]);
    }
    w.i64(static_cast<int64_t>(st.reductions.size()));
    for (const loop::Reduction& r : st.reductions) {
      w.i64(static_cast<int64_t>(r.op));
      w.i64(r.instr);
      w.i64(static_cast<int64_t>(r.type));
    }
  }
  return std::move(w.out);
}

}  // namespace detail

std::string emit_key(const KernelInput& in, int vector_bits) {
  // NB: planning builds no IR; the emitter only needs a context for its builder.
  thread_local llvm::LLVMContext context;
  thread_local llvm::Module scratch("fastdyn_plan", context);
  return detail::KernelEmitter(in, scratch, vector_bits, "plan").plan_key();
}

std::vector<int32_t> emit_kernel(const KernelInput& in, llvm::Module& m, int vector_bits, const std::string& symbol) {
  detail::KernelEmitter e(in, m, vector_bits, symbol);
  e.emit();
  return e.size_params();
}

std::vector<int32_t> emit_kernel(const loop::Program& p, const loop::Kernel& k, llvm::Module& m, int vector_bits,
                                 const std::string& symbol) {
  return emit_kernel(kernel_input(p, k), m, vector_bits, symbol);
}

std::vector<std::string> emit_program(const loop::Program& p, llvm::Module& m, int vector_bits) {
  std::vector<std::string> names;
  for (const loop::Kernel& k : p.kernels) {
    emit_kernel(p, k, m, vector_bits, k.name);
    names.push_back(k.name);
  }
  return names;
}

}  // namespace fastdyn::codegen::llvm_emit