// codegen/llvm/emit.cpp — emit_program: loop IR kernels as LLVM IR (see emit.h for the ABI).
//
// Structure per kernel: <name>(slots, status) packs its arguments and calls fastdyn_parallel_for
// with <name>.body(ctx, begin, end); the body turns each task number into an outer point, computes
// each access's base element offset there, and runs the stages. Loop counters and accumulators
// live in allocas (the engine's O3 pipeline promotes them to registers), which keeps this file
// free of phi bookkeeping. One code path emits an instr for any lane count: 1 is the scalar tail
// and per-outer stages, the host width is the vector body.
#include "codegen/llvm/emit.h"

#include "codegen/llvm/inline_math.h"
#include "codegen/llvm/jit_engine.h"
#include "runtime/errors.h"

#include <llvm/Analysis/VectorUtils.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>
#include <llvm/TargetParser/Triple.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>

namespace fastdyn::codegen::llvm_emit {
namespace {

using loop::Access;
using loop::Instr;
using loop::Kernel;
using loop::Op;
using loop::Program;
using loop::ReduceOp;
using loop::Stage;
using ST = c10::ScalarType;

// Elements a reduction accumulates per lane before its partial sum is flushed (blocked summation).
constexpr int64_t kSumBlock = 4096;
// Sums cascade over three levels: a block partial, flushed every block into a middle partial,
// flushed every kCascade blocks into the total, so that no partial adds more than ~kCascade
// numbers of similar size; the error grows like kCascade * eps instead of n * eps.
constexpr int64_t kCascade = 64;
// Column mode (a reduction whose reduced dims are strided and whose kept innermost dim is
// contiguous): lanes are kept outer points, a task covers kColumnVectors vectors of them (a wide
// strip of each row: fewer pages and more independent adds per step), and a sum's block partial
// is flushed every kColumnBlock rows.
constexpr int kColumnVectors = 4;
constexpr int64_t kColumnBlock = 64;
// Split mode (a kernel without outer loops, e.g. a full reduction): it splits when it has at least
// kSplitMinElements points, into chunks of about kSplitChunkElements, at most kSplitMaxChunks.
constexpr int64_t kSplitMinElements = int64_t{1} << 18;
constexpr int64_t kSplitChunkElements = int64_t{1} << 17;
constexpr int64_t kSplitMaxChunks = 64;
// Independent vector accumulators per reduction: the vector loop is unrolled this many times so
// that additions do not wait on each other (floating-point adds may not be reassociated).
constexpr int kUnroll = 4;
// A pure pointwise kernel's rows are split into blocks of this many elements across threads.
constexpr int64_t kRowBlock = 16384;
// Work (elements) below which a parallel chunk is not worth a thread.
constexpr int64_t kGrainElements = 32768;

bool is_fp(ST t) { return t == ST::Float || t == ST::Double; }

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
int64_t streaming_store_threshold_bytes() { return last_level_cache_bytes(); }

// Strides of one access, after the plan: element offset = base + sum_d stride[d] * i_d (+ dyn).
struct Addr {
  int32_t slot = -1;
  ST storage = ST::Float;
  int64_t base = 0;
  std::vector<int64_t> stride;  // per kernel dim
  int32_t dynamic = -1;          // instr id in the stage
  int64_t dyn_stride = 0, dyn_size = 0;
};

Addr address_of(const Program& p, const Kernel& k, const Access& a) {
  const TensorMeta& m = p.graph.meta(a.value);
  const loop::ValuePlan& pl = p.plans.at(static_cast<size_t>(a.value));
  FD_CHECK(pl.slot >= 0, "llvm emitter: v" + std::to_string(a.value) + " has no buffer slot");
  Addr r;
  r.slot = pl.slot;
  r.storage = m.dtype;
  r.stride.assign(static_cast<size_t>(k.dims()), 0);
  if (pl.kind == loop::ValuePlan::Kind::Alias) r.base = m.storage_offset - p.graph.meta(pl.root).storage_offset;
  for (size_t row = 0; row < a.index.size(); ++row) {
    const loop::AffineIndex& ix = a.index[row];
    const int64_t s = m.strides[row];
    r.base += ix.constant * s;
    for (size_t d = 0; d < ix.coef.size(); ++d) r.stride[d] += ix.coef[d] * s;
    if (ix.dynamic >= 0) {
      r.dynamic = ix.dynamic;
      r.dyn_stride = s;
      r.dyn_size = m.sizes[row];
    }
  }
  return r;
}

class KernelEmitter {
 public:
  KernelEmitter(const Program& p, const Kernel& k, llvm::Module& m, int vector_bits, std::string symbol)
      : p_(p), k_(k), m_(m), ctx_(m.getContext()), b_(ctx_), vf_(std::max(1, vector_bits / 32)),
        symbol_(std::move(symbol)) {}

  void emit() {
    auto* ptr = llvm::PointerType::get(ctx_, 0);
    auto* i64 = b_.getInt64Ty();
    prepare();
    if (split_) {
      emit_split();
      return;
    }
    // ---- the body: (ctx, begin, end) ----
    auto* body_ty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, i64, i64}, false);
    body_ = llvm::Function::Create(body_ty, llvm::Function::InternalLinkage, symbol_ + ".body", m_);
    fn_ = body_;
    auto* entry = llvm::BasicBlock::Create(ctx_, "entry", body_);
    b_.SetInsertPoint(entry);
    llvm::Value* ctxp = body_->getArg(0);
    slots_ = b_.CreateLoad(ptr, ctxp);
    status_ = b_.CreateLoad(ptr, b_.CreateGEP(ptr, ctxp, {b_.getInt64(1)}));
    for_loop(body_->getArg(1), body_->getArg(2), b_.getInt64(1), [&](llvm::Value* task) { emit_task(task); });
    // Streaming stores are weakly ordered: fence them before this thread's chunk counts as done.
    if (nt_store_ >= 0 && llvm::Triple(m_.getTargetTriple()).isX86())
      b_.CreateCall(llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::x86_sse_sfence));
    b_.CreateRetVoid();
    // ---- the entry point ----
    auto* fn_ty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr}, false);
    auto* f = llvm::Function::Create(fn_ty, llvm::Function::ExternalLinkage, symbol_, m_);
    fn_ = f;
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", f));
    llvm::Value* pack = b_.CreateAlloca(ptr, b_.getInt64(2));
    b_.CreateStore(f->getArg(0), pack);
    b_.CreateStore(f->getArg(1), b_.CreateGEP(ptr, pack, {b_.getInt64(1)}));
    auto* pf_ty = llvm::FunctionType::get(b_.getVoidTy(), {i64, i64, ptr, ptr}, false);
    llvm::FunctionCallee pf = m_.getOrInsertFunction("fastdyn_parallel_for", pf_ty);
    b_.CreateCall(pf, {b_.getInt64(tasks_), b_.getInt64(grain_), body_, pack});
    b_.CreateRetVoid();
  }

 private:
  // ---- dims, collapsed ------------------------------------------------------------------------

  // The loop dims after merging neighbours that every access walks contiguously, and the task
  // layout. Pure pointwise kernels treat all dims alike (a contiguous tensor becomes one row).
  void prepare() {
    for (const Stage& s : k_.stages) {
      std::vector<Addr> loads, stores;
      for (const Access& a : s.loads) loads.push_back(address_of(p_, k_, a));
      for (const loop::Store& st : s.stores) stores.push_back(address_of(p_, k_, st.dst));
      load_addr_.push_back(std::move(loads));
      store_addr_.push_back(std::move(stores));
    }
    // Buffers are addressed through the kernel's own argument array (see kernel_slots).
    const std::vector<int32_t> used = kernel_slots(p_, k_);
    for (auto* addrs : {&load_addr_, &store_addr_})
      for (std::vector<Addr>& stage : *addrs)
        for (Addr& a : stage)
          a.slot = static_cast<int32_t>(std::find(used.begin(), used.end(), a.slot) - used.begin());
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
    // Loop order: natural, except that a pure pointwise kernel walks its first store's memory
    // order (the smallest stride innermost), so a transposed output is written contiguously.
    std::vector<int32_t> order;
    for (size_t d = 0; d < sizes.size(); ++d) order.push_back(static_cast<int32_t>(d));
    if (pure_ && !store_addr_[0].empty()) {
      const Addr& st = store_addr_[0][0];
      std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
        return std::abs(st.stride[static_cast<size_t>(x)]) > std::abs(st.stride[static_cast<size_t>(y)]);
      });
    }
    for (size_t pos = 0; pos < order.size(); ++pos) {
      const size_t d = static_cast<size_t>(order[pos]);
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
    for (auto& grp : groups) {
      int64_t size = 1;
      for (int32_t d : grp) size *= sizes[static_cast<size_t>(d)];
      loop_size_.push_back(size);
      loop_dim_.push_back(grp.back());  // the innermost kernel dim carries the stride
    }
    outer_numel_ = 1;
    for (size_t l = 0; l < n_outer_; ++l) outer_numel_ *= loop_size_[l];
    inner_numel_ = 1;
    for (size_t l = n_outer_; l < loop_size_.size(); ++l) inner_numel_ *= loop_size_[l];
    if (pure_ && loop_size_.size() > n_outer_) {
      row_ = loop_size_.back();
      blocks_ = row_ > kRowBlock ? (row_ + kRowBlock - 1) / kRowBlock : 1;
    }
    tasks_ = outer_numel_ * blocks_;
    int64_t work = pure_ ? std::min(row_, kRowBlock) : inner_numel_ * static_cast<int64_t>(k_.stages.size());
    choose_column_mode();
    if (column_) {
      const int64_t lane_size = loop_size_[n_outer_ - 1];
      col_groups_ = (lane_size + col_width_ - 1) / col_width_;
      tasks_ = outer_numel_ / lane_size * col_groups_;
      work *= col_width_;
    }
    grain_ = std::max<int64_t>(1, kGrainElements / std::max<int64_t>(work, 1));
    choose_streaming_store();
    choose_split_mode();
    // An empty reduction still stores its identity at every outer point.
    if (outer_numel_ == 0 || (pure_ && inner_numel_ == 0)) tasks_ = 0;
  }

  int64_t stride(const Addr& a, size_t loop) const { return a.stride[static_cast<size_t>(loop_dim_[loop])]; }

  // Row mode (the default) vectorises along the innermost loop. Column mode vectorises along the
  // innermost outer loop instead, when that is where the memory is contiguous: x.sum(0) on a
  // row-major matrix then loads whole vectors of a row and keeps one accumulator per output lane,
  // where row mode would gather one element per lane with the row stride. Accesses are weighted
  // by how often they run (inner stages: every inner point; per-outer stages: once).
  void choose_column_mode() {
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
  void choose_streaming_store() {
    nt_store_ = -1;
    if (!pure_ || vf_ <= 1 || loop_size_.size() <= n_outer_) return;
    const size_t row = loop_size_.size() - 1;
    for (size_t w = 0; w < store_addr_[0].size(); ++w) {
      const Addr& a = store_addr_[0][w];
      const TensorMeta& m = p_.graph.meta(k_.stages[0].stores[w].dst.value);
      const int64_t bytes = m.numel() * static_cast<int64_t>(c10::elementSize(m.dtype));
      if (a.dynamic >= 0 || stride(a, row) != 1 || bytes < streaming_store_threshold_bytes()) continue;
      nt_store_ = static_cast<int32_t>(w);
      nt_align_ = std::min<int64_t>(64, static_cast<int64_t>(vf_) * static_cast<int64_t>(c10::elementSize(a.storage)));
      return;
    }
  }

  // ---- loops ------------------------------------------------------------------------------------

  void for_loop(llvm::Value* lo, llvm::Value* hi, llvm::Value* step, const std::function<void(llvm::Value*)>& body) {
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

  llvm::Value* entry_alloca(llvm::Type* t) {
    llvm::IRBuilder<> e(&fn_->getEntryBlock(), fn_->getEntryBlock().begin());
    return e.CreateAlloca(t);
  }

  // ---- split mode: one long reduction over all threads ------------------------------------------

  // A kernel with no outer loop (a full reduction such as x.sum(), or softmax over a whole 1-d
  // tensor) would run on one thread. Split mode cuts its first loop into a fixed number of chunks
  // (from the size alone, so results do not depend on the thread count) and gives each inner stage
  // its own parallel body, which leaves one partial per chunk and reduction in a scratch array on
  // the entry function's stack; the entry combines the partials pairwise in chunk order, then runs
  // the next stage. Per-outer stages run in the entry itself.
  void choose_split_mode() {
    split_ = false;
    if (pure_ || column_ || n_outer_ != 0 || loop_size_.empty() || inner_numel_ < kSplitMinElements) return;
    for (const Stage& st : k_.stages) {
      if (st.per_outer) continue;
      if (loop::has_scan(st)) return;  // a scan is sequential along the split loop
      for (const Instr& in : st.instrs)
        if (in.op == Op::StageValue) return;  // per-outer values feeding later inner stages
    }
    split_chunks_ = std::min<int64_t>({kSplitMaxChunks, loop_size_[0], std::max<int64_t>(2, inner_numel_ / kSplitChunkElements)});
    if (split_chunks_ < 2) return;
    split_ = true;
    tasks_ = split_chunks_;
    grain_ = 1;
  }

  void emit_split() {
    auto* ptr = llvm::PointerType::get(ctx_, 0);
    auto* i64 = b_.getInt64Ty();
    int64_t total_red = 0, max_red = 1;
    std::vector<int64_t> first_red;  // per stage: global number of its first reduction
    for (const Stage& st : k_.stages) {
      first_red.push_back(total_red);
      total_red += static_cast<int64_t>(st.reductions.size());
      max_red = std::max<int64_t>(max_red, static_cast<int64_t>(st.reductions.size()));
    }
    // partials[(chunk * max_red + r) * 2 + {0: value, 1: arg index}], reduced[global r]: 8-byte cells.
    auto cell = [&](llvm::Value* base, llvm::Value* i) { return b_.CreateGEP(i64, base, {i}); };
    auto load_reduced = [&](llvm::Value* arr, int64_t count) {
      reduced_.clear();
      int64_t g = 0;
      for (size_t s = 0; s < k_.stages.size() && g < count; ++s)
        for (const loop::Reduction& red : k_.stages[s].reductions) {
          if (g >= count) break;
          const bool arg = red.op == ReduceOp::ArgMax || red.op == ReduceOp::ArgMin;
          reduced_.push_back(b_.CreateLoad(arg ? b_.getInt64Ty() : vec_type(value_type(s, red.instr), 1), cell(arr, b_.getInt64(g))));
          ++g;
        }
    };
    auto* body_ty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, i64, i64}, false);
    std::vector<llvm::Function*> bodies(k_.stages.size(), nullptr);
    for (size_t s = 0; s < k_.stages.size(); ++s) {
      const Stage& st = k_.stages[s];
      if (st.per_outer) continue;
      llvm::Function* body = llvm::Function::Create(body_ty, llvm::Function::InternalLinkage,
                                                    symbol_ + ".stage" + std::to_string(s), m_);
      bodies[s] = body;
      fn_ = body;
      b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", body));
      llvm::Value* ctxp = body->getArg(0);
      slots_ = b_.CreateLoad(ptr, ctxp);
      status_ = b_.CreateLoad(ptr, b_.CreateGEP(ptr, ctxp, {b_.getInt64(1)}));
      llvm::Value* partials = b_.CreateLoad(ptr, b_.CreateGEP(ptr, ctxp, {b_.getInt64(2)}));
      llvm::Value* reduced = b_.CreateLoad(ptr, b_.CreateGEP(ptr, ctxp, {b_.getInt64(3)}));
      for_loop(body->getArg(1), body->getArg(2), b_.getInt64(1), [&](llvm::Value* chunk) {
        compute_bases({});
        load_reduced(reduced, first_red[s]);
        stage_values_.assign(k_.stages.size(), {});
        split_lo_ = b_.CreateSDiv(b_.CreateMul(chunk, b_.getInt64(loop_size_[0])), b_.getInt64(split_chunks_));
        split_hi_ = b_.CreateSDiv(b_.CreateMul(b_.CreateAdd(chunk, b_.getInt64(1)), b_.getInt64(loop_size_[0])),
                                  b_.getInt64(split_chunks_));
        emit_inner_stage(s, nullptr, 0);
        split_lo_ = split_hi_ = nullptr;
        for (size_t r = 0; r < st.reductions.size(); ++r) {
          llvm::Value* at = b_.CreateMul(b_.CreateAdd(b_.CreateMul(chunk, b_.getInt64(max_red)), b_.getInt64(static_cast<int64_t>(r))),
                                         b_.getInt64(2));
          const bool arg = st.reductions[r].op == ReduceOp::ArgMax || st.reductions[r].op == ReduceOp::ArgMin;
          b_.CreateStore(reduced_[static_cast<size_t>(first_red[s]) + r], cell(partials, b_.CreateAdd(at, b_.getInt64(arg ? 1 : 0))));
          if (arg) b_.CreateStore(arg_best_.at(r), cell(partials, at));
        }
      });
      b_.CreateRetVoid();
    }
    // ---- the entry point ----
    auto* fn_ty = llvm::FunctionType::get(b_.getVoidTy(), {ptr, ptr}, false);
    auto* f = llvm::Function::Create(fn_ty, llvm::Function::ExternalLinkage, symbol_, m_);
    fn_ = f;
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", f));
    slots_ = f->getArg(0);
    status_ = f->getArg(1);
    llvm::Value* partials = b_.CreateAlloca(i64, b_.getInt64(split_chunks_ * max_red * 2));
    llvm::Value* reduced = b_.CreateAlloca(i64, b_.getInt64(std::max<int64_t>(total_red, 1)));
    llvm::Value* pack = b_.CreateAlloca(ptr, b_.getInt64(4));
    const std::array<llvm::Value*, 4> fields{slots_, status_, partials, reduced};
    for (size_t i = 0; i < fields.size(); ++i) b_.CreateStore(fields[i], b_.CreateGEP(ptr, pack, {b_.getInt64(static_cast<int64_t>(i))}));
    auto* pf_ty = llvm::FunctionType::get(b_.getVoidTy(), {i64, i64, ptr, ptr}, false);
    llvm::FunctionCallee pf = m_.getOrInsertFunction("fastdyn_parallel_for", pf_ty);
    compute_bases({});
    stage_values_.assign(k_.stages.size(), {});
    for (size_t s = 0; s < k_.stages.size(); ++s) {
      const Stage& st = k_.stages[s];
      if (st.per_outer) {
        load_reduced(reduced, total_red);
        run_point(s, 1, {}, nullptr);
        continue;
      }
      b_.CreateCall(pf, {b_.getInt64(split_chunks_), b_.getInt64(1), bodies[s], pack});
      for (size_t r = 0; r < st.reductions.size(); ++r) {
        const loop::Reduction& red = st.reductions[r];
        ST vt = value_type(s, red.instr);
        const bool arg = red.op == ReduceOp::ArgMax || red.op == ReduceOp::ArgMin;
        // Pairwise over the chunks, in chunk order (the left operand holds the lower indices).
        std::vector<std::pair<llvm::Value*, llvm::Value*>> parts;
        for (int64_t c = 0; c < split_chunks_; ++c) {
          const int64_t at = (c * max_red + static_cast<int64_t>(r)) * 2;
          llvm::Value* v = b_.CreateLoad(vec_type(vt, 1), cell(partials, b_.getInt64(at)));
          llvm::Value* i = arg ? b_.CreateLoad(i64, cell(partials, b_.getInt64(at + 1))) : nullptr;
          parts.emplace_back(v, i);
        }
        while (parts.size() > 1) {
          std::vector<std::pair<llvm::Value*, llvm::Value*>> next;
          for (size_t q = 0; q + 1 < parts.size(); q += 2) {
            auto [lv, li] = parts[q];
            auto [rv, ri] = parts[q + 1];
            if (arg) {
              llvm::Value* take = better(red.op, vt, rv, lv);
              next.emplace_back(b_.CreateSelect(take, rv, lv), b_.CreateSelect(take, ri, li));
            } else {
              next.emplace_back(combine(red.op, vt, lv, rv), nullptr);
            }
          }
          if (parts.size() % 2) next.push_back(parts.back());
          parts = std::move(next);
        }
        b_.CreateStore(arg ? parts[0].second : parts[0].first, cell(reduced, b_.getInt64(first_red[s] + static_cast<int64_t>(r))));
      }
    }
    b_.CreateRetVoid();
  }

  // ---- per task ---------------------------------------------------------------------------------

  void emit_task(llvm::Value* task) {
    llvm::Value* o = task;
    llvm::Value* block = b_.getInt64(0);
    if (blocks_ > 1) {
      o = b_.CreateUDiv(task, b_.getInt64(blocks_));
      block = b_.CreateURem(task, b_.getInt64(blocks_));
    }
    llvm::Value* group = nullptr;
    if (column_) {
      group = b_.CreateURem(o, b_.getInt64(col_groups_));
      o = b_.CreateUDiv(o, b_.getInt64(col_groups_));
    }
    // Outer multi-index, innermost fastest (column mode: the lane loop's first point of the group).
    std::vector<llvm::Value*> oidx(n_outer_);
    for (size_t l = n_outer_; l-- > 0;) {
      if (column_ && l + 1 == n_outer_) {
        oidx[l] = b_.CreateMul(group, b_.getInt64(col_width_));
        continue;
      }
      oidx[l] = b_.CreateURem(o, b_.getInt64(loop_size_[l]));
      o = b_.CreateUDiv(o, b_.getInt64(loop_size_[l]));
    }
    if (!column_) {
      run_stages(oidx, block, 0);
      return;
    }
    const size_t lane = n_outer_ - 1;
    const int64_t lane_size = loop_size_[lane];
    if (lane_size % col_width_ == 0) {
      run_stages(oidx, nullptr, static_cast<int>(col_width_));
      return;
    }
    // Only the last group is partial: whole vectors, then single points.
    llvm::Value* j0 = oidx[lane];
    auto* full = llvm::BasicBlock::Create(ctx_, "group.full", fn_);
    auto* part = llvm::BasicBlock::Create(ctx_, "group.part", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "group.done", fn_);
    b_.CreateCondBr(b_.CreateICmpSLE(b_.CreateAdd(j0, b_.getInt64(col_width_)), b_.getInt64(lane_size)), full, part);
    b_.SetInsertPoint(full);
    run_stages(oidx, nullptr, static_cast<int>(col_width_));
    b_.CreateBr(done);
    b_.SetInsertPoint(part);
    llvm::Value* rest = b_.CreateSub(b_.getInt64(lane_size), j0);
    llvm::Value* vec_end = b_.CreateAdd(j0, b_.CreateMul(b_.CreateSDiv(rest, b_.getInt64(vf_)), b_.getInt64(vf_)));
    if (col_width_ > vf_)
      for_loop(j0, vec_end, b_.getInt64(vf_), [&](llvm::Value* j) {
        oidx[lane] = j;
        run_stages(oidx, nullptr, vf_);
      });
    for_loop(vec_end, b_.getInt64(lane_size), b_.getInt64(1), [&](llvm::Value* j) {
      oidx[lane] = j;
      run_stages(oidx, nullptr, 1);
    });
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
  }

  // Every stage at one outer point (column mode: `col_lanes` consecutive points of the lane loop).
  void run_stages(const std::vector<llvm::Value*>& oidx, llvm::Value* block, int col_lanes) {
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
  void compute_bases(const std::vector<llvm::Value*>& oidx) {
    auto bases = [&](std::vector<std::vector<Addr>>& addrs, std::vector<std::vector<llvm::Value*>>& out) {
      out.clear();
      for (auto& v : addrs) {
        std::vector<llvm::Value*> row;
        for (const Addr& a : v) {
          llvm::Value* off = b_.getInt64(a.base);
          for (size_t l = 0; l < n_outer_; ++l)
            if (stride(a, l) != 0) off = b_.CreateAdd(off, b_.CreateMul(oidx[l], b_.getInt64(stride(a, l))));
          row.push_back(off);
        }
        out.push_back(row);
      }
    };
    bases(load_addr_, load_base_);
    bases(store_addr_, store_base_);
  }

  // ---- inner stages -------------------------------------------------------------------------------

  struct Acc {
    std::array<llvm::Value*, kUnroll> vec{};   // vector partials (allocas), one per unrolled slot
    std::array<llvm::Value*, kUnroll> vidx{};  // arg: vector best indices
    std::array<llvm::Value*, kUnroll> blk{};   // float sums: block partials (see kCascade)
    std::array<llvm::Value*, kUnroll> mid{};   // float sums: middle partials
    llvm::Value* sc = nullptr;     // scalar accumulator (row mode's tail)
    llvm::Value* sidx = nullptr;
    int width = 1, slots = 1;      // lanes of vec/vidx/blk/mid, and how many of them are used
  };

  // Row mode (col_lanes == 0): vectors along the innermost loop, kUnroll accumulators, a scalar
  // tail, lanes combined at the end. Column mode: every point is col_lanes outer points wide, one
  // accumulator of col_lanes lanes whose lanes are the results.
  void emit_inner_stage(size_t s, llvm::Value* block, int col_lanes) {
    const Stage& st = k_.stages[s];
    const size_t n_inner_loops = loop_size_.size() - n_outer_;
    // Accumulators.
    accs_.assign(st.reductions.size(), Acc());
    arg_best_.assign(st.reductions.size(), nullptr);
    for (size_t r = 0; r < st.reductions.size(); ++r) {
      const loop::Reduction& red = st.reductions[r];
      ST vt = value_type(s, red.instr);
      Acc& a = accs_[r];
      a.width = column_ ? col_lanes : vf_;
      a.slots = column_ ? 1 : kUnroll;
      a.sc = entry_alloca(vec_type(vt, 1));
      b_.CreateStore(identity(red.op, vt, 1), a.sc);
      const bool arg = red.op == ReduceOp::ArgMax || red.op == ReduceOp::ArgMin;
      if (arg) {
        a.sidx = entry_alloca(b_.getInt64Ty());
        b_.CreateStore(b_.getInt64(std::numeric_limits<int64_t>::max()), a.sidx);
      }
      for (int u = 0; u < a.slots; ++u) {
        a.vec[u] = entry_alloca(vec_type(vt, a.width));
        b_.CreateStore(identity(red.op, vt, a.width), a.vec[u]);
        if (arg) {
          a.vidx[u] = entry_alloca(vec_type(ST::Long, a.width));
          b_.CreateStore(splat(b_.getInt64(std::numeric_limits<int64_t>::max()), a.width), a.vidx[u]);
        }
        if (red.op == ReduceOp::Sum && is_fp(vt)) {
          a.blk[u] = entry_alloca(vec_type(vt, a.width));
          b_.CreateStore(identity(red.op, vt, a.width), a.blk[u]);
          a.mid[u] = entry_alloca(vec_type(vt, a.width));
          b_.CreateStore(identity(red.op, vt, a.width), a.mid[u]);
        }
      }
    }
    // Scans: a running sum per CumSum instr, restarted at every outer point.
    scans_.assign(st.instrs.size(), nullptr);
    for (size_t i = 0; i < st.instrs.size(); ++i) {
      if (st.instrs[i].op != Op::CumSum) continue;
      const int width = column_ ? col_lanes : 1;
      scans_[i] = entry_alloca(vec_type(st.instrs[i].type, width));
      b_.CreateStore(constant(0, st.instrs[i].type, width), scans_[i]);
    }
    if (n_inner_loops == 0) {
      run_point(s, column_ ? col_lanes : 1, {}, b_.getInt64(0));
    } else {
      std::vector<llvm::Value*> idx(n_inner_loops);
      std::function<void(size_t, llvm::Value*)> nest = [&](size_t l, llvm::Value* flat) {
        const size_t loop = n_outer_ + l;
        // Split mode: this chunk's part of the first loop.
        llvm::Value* first_lo = l == 0 && split_lo_ ? split_lo_ : b_.getInt64(0);
        llvm::Value* first_hi = l == 0 && split_hi_ ? split_hi_ : b_.getInt64(loop_size_[loop]);
        if (l + 1 < n_inner_loops) {
          for_loop(first_lo, first_hi, b_.getInt64(1), [&](llvm::Value* i) {
            idx[l] = i;
            nest(l + 1, b_.CreateMul(b_.CreateAdd(flat, i), b_.getInt64(loop_size_[loop + 1])));
          });
          return;
        }
        llvm::Value* lo = first_lo;
        llvm::Value* hi = first_hi;
        if (blocks_ > 1) {
          lo = b_.CreateMul(block, b_.getInt64(kRowBlock));
          hi = b_.CreateSelect(b_.CreateICmpSLT(b_.CreateAdd(lo, b_.getInt64(kRowBlock)), hi),
                               b_.CreateAdd(lo, b_.getInt64(kRowBlock)), hi);
        }
        if (column_) {
          cascade(s, lo, hi, kColumnBlock, [&](llvm::Value* blo, llvm::Value* bhi) {
            for_loop(blo, bhi, b_.getInt64(1), [&](llvm::Value* j) {
              idx[l] = j;
              run_point(s, col_lanes, idx, b_.CreateAdd(flat, j));
            });
          });
        } else {
          innermost(s, idx, l, lo, hi, flat);
        }
      };
      nest(0, b_.getInt64(0));
    }
    // Combine the lanes, then the tail, into one result per reduction.
    for (size_t r = 0; r < st.reductions.size(); ++r) {
      const loop::Reduction& red = st.reductions[r];
      ST vt = value_type(s, red.instr);
      Acc& a = accs_[r];
      if (a.blk[0]) {
        flush(red, a, vt, a.blk, a.mid);
        flush(red, a, vt, a.mid, a.vec);
      }
      if (column_) {  // each lane is one outer point's result
        if (red.op == ReduceOp::ArgMax || red.op == ReduceOp::ArgMin) {
          llvm::Value* bidx = b_.CreateLoad(vec_type(ST::Long, a.width), a.vidx[0]);
          llvm::Value* none = splat(b_.getInt64(std::numeric_limits<int64_t>::max()), a.width);
          reduced_.push_back(b_.CreateSelect(b_.CreateICmpEQ(bidx, none), splat(b_.getInt64(0), a.width), bidx));
        } else {
          reduced_.push_back(b_.CreateLoad(vec_type(vt, a.width), a.vec[0]));
        }
        continue;
      }
      if (red.op == ReduceOp::ArgMax || red.op == ReduceOp::ArgMin) {
        llvm::Value* best = b_.CreateLoad(vec_type(vt, 1), a.sc);
        llvm::Value* bidx = b_.CreateLoad(b_.getInt64Ty(), a.sidx);
        for (int u = 0; u < kUnroll; ++u) {
          llvm::Value* vec = b_.CreateLoad(vec_type(vt, vf_), a.vec[u]);
          llvm::Value* vidx = b_.CreateLoad(vec_type(ST::Long, vf_), a.vidx[u]);
          for (int l = 0; l < vf_; ++l) {
            llvm::Value* v = vf_ > 1 ? b_.CreateExtractElement(vec, l) : vec;
            llvm::Value* i = vf_ > 1 ? b_.CreateExtractElement(vidx, l) : vidx;
            llvm::Value* take = b_.CreateOr(better(red.op, vt, v, best),
                                            b_.CreateAnd(same(vt, v, best), b_.CreateICmpSLT(i, bidx)));
            best = b_.CreateSelect(take, v, best);
            bidx = b_.CreateSelect(take, i, bidx);
          }
        }
        bidx = b_.CreateSelect(b_.CreateICmpEQ(bidx, b_.getInt64(std::numeric_limits<int64_t>::max())), b_.getInt64(0), bidx);
        reduced_.push_back(bidx);
        arg_best_[r] = best;
        continue;
      }
      // Pairwise: the unrolled partials, then halve the vector until one lane is left.
      std::vector<llvm::Value*> parts;
      for (int u = 0; u < kUnroll; ++u) parts.push_back(b_.CreateLoad(vec_type(vt, vf_), a.vec[u]));
      while (parts.size() > 1) {
        std::vector<llvm::Value*> next;
        for (size_t q = 0; q + 1 < parts.size(); q += 2) next.push_back(combine(red.op, vt, parts[q], parts[q + 1]));
        if (parts.size() % 2) next.push_back(parts.back());
        parts = std::move(next);
      }
      llvm::Value* vec = parts[0];
      for (int w = vf_; w > 1; w /= 2) {
        llvm::SmallVector<int, 16> lo, hi;
        for (int l = 0; l < w / 2; ++l) { lo.push_back(l); hi.push_back(l + w / 2); }
        vec = combine(red.op, vt, b_.CreateShuffleVector(vec, lo), b_.CreateShuffleVector(vec, hi));
      }
      llvm::Value* lane = vf_ > 1 ? b_.CreateExtractElement(vec, static_cast<uint64_t>(0)) : vec;
      if (lane->getType()->isVectorTy()) lane = b_.CreateExtractElement(lane, static_cast<uint64_t>(0));
      reduced_.push_back(combine(red.op, vt, lane, b_.CreateLoad(vec_type(vt, 1), a.sc)));
    }
  }

  // to[u] += from[u]; from[u] = 0, for every used slot (one cascade level of a float sum).
  void flush(const loop::Reduction& red, Acc& a, ST vt, std::array<llvm::Value*, kUnroll>& from,
             std::array<llvm::Value*, kUnroll>& to) {
    llvm::Type* t = vec_type(vt, a.width);
    for (int u = 0; u < a.slots; ++u) {
      b_.CreateStore(combine(red.op, vt, b_.CreateLoad(t, to[u]), b_.CreateLoad(t, from[u])), to[u]);
      b_.CreateStore(identity(red.op, vt, a.width), from[u]);
    }
  }

  // body(blo, bhi) over [lo, hi) in blocks of `block` points; float sums flush their block partial
  // after each block and their middle partial after every kCascade blocks.
  void cascade(size_t s, llvm::Value* lo, llvm::Value* hi, int64_t block,
               const std::function<void(llvm::Value*, llvm::Value*)>& body) {
    const Stage& st = k_.stages[s];
    bool blocked = false;
    for (const Acc& a : accs_) blocked |= a.blk[0] != nullptr;
    if (!blocked) {
      body(lo, hi);
      return;
    }
    auto min = [&](llvm::Value* x, llvm::Value* y) { return b_.CreateSelect(b_.CreateICmpSLT(x, y), x, y); };
    for_loop(lo, hi, b_.getInt64(block * kCascade), [&](llvm::Value* jb2) {
      llvm::Value* e2 = min(b_.CreateAdd(jb2, b_.getInt64(block * kCascade)), hi);
      for_loop(jb2, e2, b_.getInt64(block), [&](llvm::Value* jb) {
        body(jb, min(b_.CreateAdd(jb, b_.getInt64(block)), e2));
        for (size_t r = 0; r < st.reductions.size(); ++r)
          if (accs_[r].blk[0]) flush(st.reductions[r], accs_[r], value_type(s, st.reductions[r].instr), accs_[r].blk, accs_[r].mid);
      });
      for (size_t r = 0; r < st.reductions.size(); ++r)
        if (accs_[r].blk[0]) flush(st.reductions[r], accs_[r], value_type(s, st.reductions[r].instr), accs_[r].mid, accs_[r].vec);
    });
  }

  // Row mode's innermost loop: vector body (blocked, see cascade), then the scalar tail.
  void innermost(size_t s, std::vector<llvm::Value*>& idx, size_t l, llvm::Value* lo, llvm::Value* hi, llvm::Value* flat) {
    const Stage& st = k_.stages[s];
    auto scalar_loop = [&](llvm::Value* from, llvm::Value* to) {
      for_loop(from, to, b_.getInt64(1), [&](llvm::Value* j) {
        idx[l] = j;
        run_point(s, 1, idx, b_.CreateAdd(flat, j));
      });
    };
    if (vf_ <= 1 || loop::has_scan(st)) {  // a scan runs point after point
      scalar_loop(lo, hi);
      return;
    }
    if (nt_store_ >= 0) {
      // Peel single points until the streaming store's address is aligned for vector stores.
      // NB: an element misaligned for its own type (a foreign buffer) never streams.
      const Addr& a = store_addr_[s][static_cast<size_t>(nt_store_)];
      const int64_t esize = static_cast<int64_t>(c10::elementSize(a.storage));
      llvm::Type* et = storage_type(a.storage);
      llvm::Value* addr = b_.CreatePtrToInt(
          b_.CreateGEP(et, slot_ptr(a.slot), {b_.CreateAdd(store_base_[s][static_cast<size_t>(nt_store_)], lo)}), b_.getInt64Ty());
      llvm::Value* n = b_.CreateSub(hi, lo);
      llvm::Value* mis = b_.CreateAnd(addr, b_.getInt64(nt_align_ - 1));
      llvm::Value* peel = b_.CreateUDiv(b_.CreateAnd(b_.CreateSub(b_.getInt64(nt_align_), mis), b_.getInt64(nt_align_ - 1)),
                                        b_.getInt64(esize));
      llvm::Value* odd = b_.CreateICmpNE(b_.CreateAnd(addr, b_.getInt64(esize - 1)), b_.getInt64(0));
      peel = b_.CreateSelect(b_.CreateOr(odd, b_.CreateICmpSGT(peel, n)), n, peel);
      llvm::Value* vlo = b_.CreateAdd(lo, peel);
      llvm::Value* vec_end = b_.CreateAdd(vlo, b_.CreateMul(b_.CreateSDiv(b_.CreateSub(hi, vlo), b_.getInt64(vf_)), b_.getInt64(vf_)));
      scalar_loop(lo, vlo);
      nt_active_ = true;
      for_loop(vlo, vec_end, b_.getInt64(vf_), [&](llvm::Value* j) {
        idx[l] = j;
        run_point(s, vf_, idx, b_.CreateAdd(flat, j));
      });
      nt_active_ = false;
      scalar_loop(vec_end, hi);
      return;
    }
    llvm::Value* n = b_.CreateSub(hi, lo);
    llvm::Value* vec_end = b_.CreateAdd(lo, b_.CreateMul(b_.CreateSDiv(n, b_.getInt64(vf_)), b_.getInt64(vf_)));
    auto vector_body = [&](llvm::Value* blo, llvm::Value* bhi) {
      llvm::Value* start = blo;
      if (!st.reductions.empty()) {
        // kUnroll points per iteration, each into its own accumulators, then single vectors.
        const int64_t step = static_cast<int64_t>(vf_) * kUnroll;
        llvm::Value* main_end = b_.CreateAdd(blo, b_.CreateMul(b_.CreateSDiv(b_.CreateSub(bhi, blo), b_.getInt64(step)), b_.getInt64(step)));
        for_loop(blo, main_end, b_.getInt64(step), [&](llvm::Value* j) {
          for (int u = 0; u < kUnroll; ++u) {
            llvm::Value* ju = b_.CreateAdd(j, b_.getInt64(static_cast<int64_t>(u) * vf_));
            idx[l] = ju;
            run_point(s, vf_, idx, b_.CreateAdd(flat, ju), u);
          }
        });
        start = main_end;
      }
      for_loop(start, bhi, b_.getInt64(vf_), [&](llvm::Value* j) {
        idx[l] = j;
        run_point(s, vf_, idx, b_.CreateAdd(flat, j));
      });
    };
    cascade(s, lo, vec_end, kSumBlock, vector_body);
    scalar_loop(vec_end, hi);
  }

  // ---- one point (lanes wide) -------------------------------------------------------------------

  ST value_type(size_t s, int32_t instr) const { return k_.stages[s].instrs.at(static_cast<size_t>(instr)).type; }

  llvm::Type* scalar_type(ST t) {
    switch (t) {
      case ST::Float: return b_.getFloatTy();
      case ST::Double: return b_.getDoubleTy();
      case ST::Long: return b_.getInt64Ty();
      case ST::Int: return b_.getInt32Ty();
      case ST::Bool: return b_.getInt1Ty();
      default: throw BackendError(std::string("llvm emitter: no compute type for ") + c10::toString(t));
    }
  }
  llvm::Type* storage_type(ST t) {
    switch (t) {
      case ST::BFloat16: return b_.getBFloatTy();
      case ST::Half: return b_.getHalfTy();
      case ST::Bool: return b_.getInt8Ty();
      default: return scalar_type(t);
    }
  }
  llvm::Type* vec_type(ST t, int lanes) {
    return lanes_of(scalar_type(t), lanes);
  }
  static llvm::Type* lanes_of(llvm::Type* t, int lanes) {
    return lanes == 1 ? t : static_cast<llvm::Type*>(llvm::FixedVectorType::get(t, static_cast<unsigned>(lanes)));
  }
  llvm::Value* splat(llvm::Value* v, int lanes) {
    if (lanes == 1 || v->getType()->isVectorTy()) return v;
    return b_.CreateVectorSplat(static_cast<unsigned>(lanes), v);
  }
  llvm::Value* constant(double v, ST t, int lanes) {
    llvm::Type* s = scalar_type(t);
    llvm::Constant* c = is_fp(t) ? llvm::ConstantFP::get(s, v)
                        : t == ST::Bool ? llvm::ConstantInt::get(s, v != 0)
                        : llvm::ConstantInt::get(s, static_cast<uint64_t>(static_cast<int64_t>(v)), true);
    return lanes == 1 ? static_cast<llvm::Value*>(c) : llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(lanes), c);
  }
  llvm::Value* identity(ReduceOp op, ST t, int lanes) {
    const bool fp = is_fp(t);
    switch (op) {
      case ReduceOp::Sum: return constant(0, t, lanes);
      case ReduceOp::Prod: return constant(1, t, lanes);
      case ReduceOp::Max:
      case ReduceOp::ArgMax:
        return fp ? constant(-INFINITY, t, lanes) : int_limit(t, lanes, true);
      case ReduceOp::Min:
      case ReduceOp::ArgMin:
        return fp ? constant(INFINITY, t, lanes) : int_limit(t, lanes, false);
    }
    return nullptr;
  }
  llvm::Value* int_limit(ST t, int lanes, bool lowest) {
    unsigned bits = scalar_type(t)->getIntegerBitWidth();
    llvm::APInt v = lowest ? llvm::APInt::getSignedMinValue(bits) : llvm::APInt::getSignedMaxValue(bits);
    llvm::Constant* c = llvm::ConstantInt::get(scalar_type(t), v);
    return lanes == 1 ? static_cast<llvm::Value*>(c) : llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(lanes), c);
  }
  llvm::Value* intrinsic(llvm::Intrinsic::ID id, llvm::ArrayRef<llvm::Value*> args) {
    return b_.CreateIntrinsic(id, {args[0]->getType()}, args);
  }
  llvm::Value* combine(ReduceOp op, ST t, llvm::Value* a, llvm::Value* b) {
    const bool fp = is_fp(t);
    switch (op) {
      case ReduceOp::Sum: return fp ? b_.CreateFAdd(a, b) : b_.CreateAdd(a, b);
      case ReduceOp::Prod: return fp ? b_.CreateFMul(a, b) : b_.CreateMul(a, b);
      case ReduceOp::Max: return intrinsic(fp ? llvm::Intrinsic::maximum : llvm::Intrinsic::smax, {a, b});
      case ReduceOp::Min: return intrinsic(fp ? llvm::Intrinsic::minimum : llvm::Intrinsic::smin, {a, b});
      default: throw InternalError("llvm emitter: combine of an arg reduction");
    }
  }
  // Strictly better for argmax/argmin; a NaN beats any number (ATen returns the first NaN).
  llvm::Value* better(ReduceOp op, ST t, llvm::Value* v, llvm::Value* best) {
    if (!is_fp(t)) return op == ReduceOp::ArgMax ? b_.CreateICmpSGT(v, best) : b_.CreateICmpSLT(v, best);
    llvm::Value* cmp = op == ReduceOp::ArgMax ? b_.CreateFCmpOGT(v, best) : b_.CreateFCmpOLT(v, best);
    return b_.CreateOr(cmp, b_.CreateAnd(b_.CreateFCmpUNO(v, v), b_.CreateFCmpORD(best, best)));
  }
  llvm::Value* same(ST t, llvm::Value* v, llvm::Value* best) {
    if (!is_fp(t)) return b_.CreateICmpEQ(v, best);
    return b_.CreateOr(b_.CreateFCmpOEQ(v, best), b_.CreateAnd(b_.CreateFCmpUNO(v, v), b_.CreateFCmpUNO(best, best)));
  }

  // Element offset of an access at the current point (lanes wide when lanes > 1 and not unit/0).
  llvm::Value* element_offset(const Addr& a, llvm::Value* base, const std::vector<llvm::Value*>& idx, int lanes,
                              const std::vector<llvm::Value*>& vals, bool& contiguous, bool& uniform) {
    llvm::Value* off = base;
    const size_t n_inner = idx.size();
    // Lanes are consecutive points of the innermost loop (row mode) or of the lane loop, the
    // innermost outer loop (column mode; its index is in `base`).
    int64_t lane_stride = column_ ? stride(a, n_outer_ - 1) : 0;
    for (size_t l = 0; l < n_inner; ++l) {
      int64_t s = stride(a, n_outer_ + l);
      if (s != 0) off = b_.CreateAdd(off, b_.CreateMul(idx[l], b_.getInt64(s)));
      if (l + 1 == n_inner && !column_) lane_stride = s;
    }
    llvm::Value* dyn = nullptr;
    bool dyn_uniform = false;
    if (a.dynamic >= 0) {
      dyn = vals.at(static_cast<size_t>(a.dynamic));
      // NB: an index that is the same in every lane (an embedding row chosen per outer point, read
      // along the row) leaves the access contiguous: one check and one vector load, no gather.
      if (llvm::Value* one = lanes > 1 ? llvm::getSplatValue(dyn) : nullptr) {
        dyn = one;
        dyn_uniform = true;
      }
      const int dyn_lanes = dyn_uniform ? 1 : lanes;
      // Out-of-range gathered indices read row 0 and raise the status flag.
      llvm::Value* size = splat(b_.getInt64(a.dyn_size), dyn_lanes);
      llvm::Value* bad = b_.CreateICmpUGE(dyn, size);
      llvm::Value* any = dyn_lanes == 1 ? bad : b_.CreateOrReduce(bad);
      llvm::Value* old = b_.CreateLoad(b_.getInt32Ty(), status_);
      b_.CreateStore(b_.CreateSelect(any, b_.getInt32(1), old), status_);
      dyn = b_.CreateSelect(bad, splat(b_.getInt64(0), dyn_lanes), dyn);
      dyn = b_.CreateMul(dyn, splat(b_.getInt64(a.dyn_stride), dyn_lanes));
    }
    contiguous = lanes > 1 && lane_stride == 1 && (!dyn || dyn_uniform);
    uniform = lanes > 1 && lane_stride == 0 && (!dyn || dyn_uniform);
    if (lanes == 1 || contiguous || uniform) return dyn ? b_.CreateAdd(off, dyn) : off;
    if (dyn_uniform) dyn = splat(dyn, lanes);
    llvm::SmallVector<llvm::Constant*, 16> steps;
    for (int i = 0; i < lanes; ++i) steps.push_back(b_.getInt64(static_cast<uint64_t>(i * lane_stride)));
    llvm::Value* v = b_.CreateAdd(splat(off, lanes), llvm::ConstantVector::get(steps));
    return dyn ? b_.CreateAdd(v, dyn) : v;
  }

  llvm::Value* slot_ptr(int32_t slot) {
    auto* ptr = llvm::PointerType::get(ctx_, 0);
    // NB: kernels never write the slot array, and saying so lets LLVM hoist these loads out of
    // loops whose stores it could not otherwise prove to miss the array.
    llvm::LoadInst* load = b_.CreateLoad(ptr, b_.CreateGEP(ptr, slots_, {b_.getInt64(slot)}));
    load->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx_, {}));
    return load;
  }

  llvm::Value* widen(llvm::Value* raw, ST storage, ST compute, int lanes) {
    switch (storage) {
      case ST::BFloat16:
      case ST::Half: return b_.CreateFPExt(raw, vec_type(ST::Float, lanes));
      case ST::Bool: return b_.CreateICmpNE(raw, llvm::Constant::getNullValue(raw->getType()));
      default: (void)compute; return raw;
    }
  }
  llvm::Value* narrow(llvm::Value* v, ST storage, int lanes) {
    switch (storage) {
      case ST::BFloat16:
      case ST::Half: return b_.CreateFPTrunc(v, lanes_of(storage_type(storage), lanes));
      case ST::Bool: return b_.CreateZExt(v, lanes_of(b_.getInt8Ty(), lanes));
      default: return v;
    }
  }

  llvm::Value* load(const Addr& a, llvm::Value* base, const std::vector<llvm::Value*>& idx, int lanes,
                    const std::vector<llvm::Value*>& vals, ST compute) {
    bool contiguous = false, uniform = false;
    llvm::Value* off = element_offset(a, base, idx, lanes, vals, contiguous, uniform);
    llvm::Type* et = storage_type(a.storage);
    llvm::Value* p = slot_ptr(a.slot);
    if (lanes == 1 || uniform) {
      llvm::Value* x = widen(b_.CreateLoad(et, b_.CreateGEP(et, p, {off})), a.storage, compute, 1);
      return splat(x, lanes);
    }
    if (contiguous) {
      auto* vt = llvm::FixedVectorType::get(et, static_cast<unsigned>(lanes));
      auto* ld = b_.CreateAlignedLoad(vt, b_.CreateGEP(et, p, {off}), llvm::MaybeAlign(et->getPrimitiveSizeInBits() / 8));
      return widen(ld, a.storage, compute, lanes);
    }
    llvm::Value* v = llvm::UndefValue::get(vec_type(compute, lanes));
    for (int i = 0; i < lanes; ++i) {
      llvm::Value* e = b_.CreateLoad(et, b_.CreateGEP(et, p, {b_.CreateExtractElement(off, i)}));
      v = b_.CreateInsertElement(v, widen(e, a.storage, compute, 1), i);
    }
    return v;
  }

  void store(const Addr& a, llvm::Value* base, const std::vector<llvm::Value*>& idx, int lanes,
             const std::vector<llvm::Value*>& vals, llvm::Value* v) {
    bool contiguous = false, uniform = false;
    llvm::Value* off = element_offset(a, base, idx, lanes, vals, contiguous, uniform);
    llvm::Type* et = storage_type(a.storage);
    llvm::Value* p = slot_ptr(a.slot);
    v = narrow(v, a.storage, lanes);
    if (lanes == 1) {
      b_.CreateStore(v, b_.CreateGEP(et, p, {off}));
      return;
    }
    if (contiguous) {
      if (nt_active_ && &a == &store_addr_[0][static_cast<size_t>(nt_store_)]) {
        llvm::StoreInst* st = b_.CreateAlignedStore(v, b_.CreateGEP(et, p, {off}), llvm::MaybeAlign(nt_align_));
        st->setMetadata(llvm::LLVMContext::MD_nontemporal,
                        llvm::MDNode::get(ctx_, {llvm::ConstantAsMetadata::get(b_.getInt32(1))}));
        return;
      }
      b_.CreateAlignedStore(v, b_.CreateGEP(et, p, {off}), llvm::MaybeAlign(et->getPrimitiveSizeInBits() / 8));
      return;
    }
    if (uniform) {  // every lane writes the same element: the last lane wins, as in the scalar loop
      b_.CreateStore(b_.CreateExtractElement(v, lanes - 1), b_.CreateGEP(et, p, {off}));
      return;
    }
    for (int i = 0; i < lanes; ++i)
      b_.CreateStore(b_.CreateExtractElement(v, i), b_.CreateGEP(et, p, {b_.CreateExtractElement(off, i)}));
  }

  // Evaluates stage s at the current point; `flat` is the flat inner index (arg reductions).
  void run_point(size_t s, int lanes, const std::vector<llvm::Value*>& idx, llvm::Value* flat, int slot = 0) {
    const Stage& st = k_.stages[s];
    std::vector<llvm::Value*> vals(st.instrs.size(), nullptr);
    for (size_t i = 0; i < st.instrs.size(); ++i) vals[i] = instr(s, st.instrs[i], lanes, idx, vals);
    for (size_t w = 0; w < st.stores.size(); ++w)
      store(store_addr_[s][w], store_base_[s][w], idx, lanes, vals, vals[static_cast<size_t>(st.stores[w].instr)]);
    if (st.per_outer) {
      stage_values_[s] = vals;
      return;
    }
    for (size_t r = 0; r < st.reductions.size(); ++r) {
      const loop::Reduction& red = st.reductions[r];
      ST vt = value_type(s, red.instr);
      Acc& a = accs_[r];
      llvm::Value* x = vals[static_cast<size_t>(red.instr)];
      if (red.op == ReduceOp::ArgMax || red.op == ReduceOp::ArgMin) {
        const bool tail = lanes == 1 && !column_;  // row mode's scalar tail has its own accumulator
        llvm::Value* accp = tail ? a.sc : a.vec[slot];
        llvm::Value* idxp = tail ? a.sidx : a.vidx[slot];
        llvm::Value* best = b_.CreateLoad(vec_type(vt, lanes), accp);
        llvm::Value* bi = b_.CreateLoad(vec_type(ST::Long, lanes), idxp);
        llvm::Value* here = splat(flat, lanes);  // column mode: every lane is at the same inner point
        if (lanes > 1 && !column_) {
          llvm::SmallVector<llvm::Constant*, 16> steps;
          for (int i = 0; i < lanes; ++i) steps.push_back(b_.getInt64(static_cast<uint64_t>(i)));
          here = b_.CreateAdd(splat(flat, lanes), llvm::ConstantVector::get(steps));
        }
        llvm::Value* take = better(red.op, vt, x, best);
        b_.CreateStore(b_.CreateSelect(take, x, best), accp);
        b_.CreateStore(b_.CreateSelect(take, here, bi), idxp);
        continue;
      }
      llvm::Value* accp = lanes == 1 && !column_ ? a.sc : (a.blk[slot] ? a.blk[slot] : a.vec[slot]);
      b_.CreateStore(combine(red.op, vt, b_.CreateLoad(vec_type(vt, lanes), accp), x), accp);
    }
  }

  llvm::Value* instr(size_t s, const Instr& in, int lanes, const std::vector<llvm::Value*>& idx,
                     const std::vector<llvm::Value*>& vals) {
    auto arg = [&](int32_t i) { return vals.at(static_cast<size_t>(i)); };
    const ST t = in.type;
    const bool fp = is_fp(t);
    switch (in.op) {
      case Op::Load:
        return load(load_addr_[s][static_cast<size_t>(in.a)], load_base_[s][static_cast<size_t>(in.a)], idx, lanes, vals, t);
      case Op::Const: return constant(in.value, t, lanes);
      case Op::Reduced: return splat(reduced_.at(static_cast<size_t>(in.a)), lanes);
      case Op::StageValue: return splat(stage_values_.at(static_cast<size_t>(in.a)).at(static_cast<size_t>(in.b)), lanes);
      case Op::Cast: return cast(arg(in.a), k_.stages[s].instrs[static_cast<size_t>(in.a)].type, t, lanes);
      case Op::Neg: return fp ? b_.CreateFNeg(arg(in.a)) : b_.CreateNeg(arg(in.a));
      case Op::Abs: return fp ? intrinsic(llvm::Intrinsic::fabs, {arg(in.a)})
                              : t == ST::Bool ? arg(in.a)
                              : b_.CreateIntrinsic(llvm::Intrinsic::abs, {arg(in.a)->getType()}, {arg(in.a), b_.getFalse()});
      case Op::Sqrt: return intrinsic(llvm::Intrinsic::sqrt, {arg(in.a)});
      case Op::Rsqrt: return b_.CreateFDiv(constant(1, t, lanes), intrinsic(llvm::Intrinsic::sqrt, {arg(in.a)}));
      case Op::Recip: return b_.CreateFDiv(constant(1, t, lanes), arg(in.a));
      case Op::Floor: return intrinsic(llvm::Intrinsic::floor, {arg(in.a)});
      case Op::Ceil: return intrinsic(llvm::Intrinsic::ceil, {arg(in.a)});
      case Op::Trunc: return intrinsic(llvm::Intrinsic::trunc, {arg(in.a)});
      case Op::Round: return intrinsic(llvm::Intrinsic::roundeven, {arg(in.a)});
      case Op::IsNan: return b_.CreateFCmpUNO(arg(in.a), arg(in.a));
      case Op::Not: return b_.CreateNot(arg(in.a));
      case Op::RoundBF16: return b_.CreateFPExt(b_.CreateFPTrunc(arg(in.a), lanes_of(b_.getBFloatTy(), lanes)), vec_type(t, lanes));
      case Op::RoundF16: return b_.CreateFPExt(b_.CreateFPTrunc(arg(in.a), lanes_of(b_.getHalfTy(), lanes)), vec_type(t, lanes));
      case Op::Exp:  // inline for f32 (see inline_math.h): no call, no spills in the loop
        return t == ST::Float ? llvm_jit::emit_exp_f32(b_, arg(in.a)) : math_call(llvm_jit::MathFn::Exp, t, {arg(in.a)}, lanes);
      case Op::Expm1: return math_call(llvm_jit::MathFn::Expm1, t, {arg(in.a)}, lanes);
      case Op::Log: return math_call(llvm_jit::MathFn::Log, t, {arg(in.a)}, lanes);
      case Op::Log1p: return math_call(llvm_jit::MathFn::Log1p, t, {arg(in.a)}, lanes);
      case Op::Log2: return math_call(llvm_jit::MathFn::Log2, t, {arg(in.a)}, lanes);
      case Op::Log10: return math_call(llvm_jit::MathFn::Log10, t, {arg(in.a)}, lanes);
      case Op::Sin: return math_call(llvm_jit::MathFn::Sin, t, {arg(in.a)}, lanes);
      case Op::Cos: return math_call(llvm_jit::MathFn::Cos, t, {arg(in.a)}, lanes);
      case Op::Tan: return math_call(llvm_jit::MathFn::Tan, t, {arg(in.a)}, lanes);
      case Op::Tanh:
        return t == ST::Float ? llvm_jit::emit_tanh_f32(b_, arg(in.a)) : math_call(llvm_jit::MathFn::Tanh, t, {arg(in.a)}, lanes);
      case Op::Sinh: return math_call(llvm_jit::MathFn::Sinh, t, {arg(in.a)}, lanes);
      case Op::Cosh: return math_call(llvm_jit::MathFn::Cosh, t, {arg(in.a)}, lanes);
      case Op::Asin: return math_call(llvm_jit::MathFn::Asin, t, {arg(in.a)}, lanes);
      case Op::Acos: return math_call(llvm_jit::MathFn::Acos, t, {arg(in.a)}, lanes);
      case Op::Atan: return math_call(llvm_jit::MathFn::Atan, t, {arg(in.a)}, lanes);
      case Op::Erf: return math_call(llvm_jit::MathFn::Erf, t, {arg(in.a)}, lanes);
      case Op::Erfc: return math_call(llvm_jit::MathFn::Erfc, t, {arg(in.a)}, lanes);
      case Op::Pow: return math_call(llvm_jit::MathFn::Pow, t, {arg(in.a), arg(in.b)}, lanes);
      case Op::Atan2: return math_call(llvm_jit::MathFn::Atan2, t, {arg(in.a), arg(in.b)}, lanes);
      case Op::Add: return fp ? b_.CreateFAdd(arg(in.a), arg(in.b)) : t == ST::Bool ? b_.CreateOr(arg(in.a), arg(in.b)) : b_.CreateAdd(arg(in.a), arg(in.b));
      case Op::Sub: return fp ? b_.CreateFSub(arg(in.a), arg(in.b)) : b_.CreateSub(arg(in.a), arg(in.b));
      case Op::Mul: return fp ? b_.CreateFMul(arg(in.a), arg(in.b)) : t == ST::Bool ? b_.CreateAnd(arg(in.a), arg(in.b)) : b_.CreateMul(arg(in.a), arg(in.b));
      // NB: lowerings divide integers only by a constant other than 0 and -1 (lowering.cpp), so
      // sdiv/srem never trap here.
      case Op::Div: return fp ? b_.CreateFDiv(arg(in.a), arg(in.b)) : b_.CreateSDiv(arg(in.a), arg(in.b));
      case Op::Fmod: return fp ? frem_lanes(arg(in.a), arg(in.b), lanes) : b_.CreateSRem(arg(in.a), arg(in.b));
      case Op::Shl: case Op::Shr: return shift(in.op, t, arg(in.a), arg(in.b));
      case Op::Max:
        return fp ? intrinsic(llvm::Intrinsic::maximum, {arg(in.a), arg(in.b)})
               : t == ST::Bool ? b_.CreateOr(arg(in.a), arg(in.b)) : intrinsic(llvm::Intrinsic::smax, {arg(in.a), arg(in.b)});
      case Op::Min:
        return fp ? intrinsic(llvm::Intrinsic::minimum, {arg(in.a), arg(in.b)})
               : t == ST::Bool ? b_.CreateAnd(arg(in.a), arg(in.b)) : intrinsic(llvm::Intrinsic::smin, {arg(in.a), arg(in.b)});
      case Op::And: return b_.CreateAnd(arg(in.a), arg(in.b));
      case Op::Or: return b_.CreateOr(arg(in.a), arg(in.b));
      case Op::Xor: return b_.CreateXor(arg(in.a), arg(in.b));
      case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge: case Op::Eq: case Op::Ne:
        return compare(in.op, k_.stages[s].instrs[static_cast<size_t>(in.a)].type, arg(in.a), arg(in.b));
      case Op::Select: return b_.CreateSelect(arg(in.a), arg(in.b), arg(in.c));
      case Op::Fma: {
        if (!fp) throw BackendError("llvm emitter: Fma on an integer type");
        llvm::Value* x = arg(in.a);
        return b_.CreateIntrinsic(llvm::Intrinsic::fma, {x->getType()}, {x, arg(in.b), arg(in.c)});
      }
      case Op::CumSum: {
        llvm::Value* accp = scans_.at(static_cast<size_t>(&in - k_.stages[s].instrs.data()));
        llvm::Value* sum = fp ? b_.CreateFAdd(b_.CreateLoad(vec_type(t, lanes), accp), arg(in.a))
                              : b_.CreateAdd(b_.CreateLoad(vec_type(t, lanes), accp), arg(in.a));
        b_.CreateStore(sum, accp);
        return sum;
      }
      case Op::Rem: break;
    }
    throw BackendError(std::string("llvm emitter: no code for ") + loop::op_name(in.op));
  }

  // frem lane by lane. x86 has no vector fmod (a vector frem becomes fmodf calls per lane anyway),
  // and NB: LLVM 19 miscompiles the vector frem that InstCombine narrows fptrunc(frem(fpext x, c))
  // into when the values come from and go to bf16.
  llvm::Value* frem_lanes(llvm::Value* a, llvm::Value* b, int lanes) {
    if (lanes == 1) return b_.CreateFRem(a, b);
    llvm::Value* out = llvm::UndefValue::get(a->getType());
    for (int i = 0; i < lanes; ++i)
      out = b_.CreateInsertElement(out, b_.CreateFRem(b_.CreateExtractElement(a, i), b_.CreateExtractElement(b, i)), i);
    return out;
  }

  // ATen's shifts: a count outside [0, bits) shifts everything out (Shl: 0; Shr: the sign fill).
  llvm::Value* shift(Op op, ST t, llvm::Value* a, llvm::Value* n) {
    if (is_fp(t) || t == ST::Bool) throw BackendError("llvm emitter: shift of a non-integer type");
    const int64_t bits = scalar_type(t)->getIntegerBitWidth();
    const int lanes = a->getType()->isVectorTy() ? static_cast<int>(llvm::cast<llvm::FixedVectorType>(a->getType())->getNumElements()) : 1;
    llvm::Value* zero = constant(0, t, lanes);
    if (op == Op::Shl) {
      llvm::Value* out = b_.CreateOr(b_.CreateICmpSLT(n, zero), b_.CreateICmpSGE(n, constant(static_cast<double>(bits), t, lanes)));
      return b_.CreateSelect(out, zero, b_.CreateShl(a, n));
    }
    llvm::Value* top = constant(static_cast<double>(bits - 1), t, lanes);
    llvm::Value* out = b_.CreateOr(b_.CreateICmpSLT(n, zero), b_.CreateICmpSGE(n, top));
    return b_.CreateAShr(a, b_.CreateSelect(out, top, n));
  }

  llvm::Value* compare(Op op, ST t, llvm::Value* a, llvm::Value* b) {
    using P = llvm::CmpInst::Predicate;
    struct Row { Op op; P f, s, u; };
    static const Row rows[] = {
        {Op::Lt, P::FCMP_OLT, P::ICMP_SLT, P::ICMP_ULT}, {Op::Le, P::FCMP_OLE, P::ICMP_SLE, P::ICMP_ULE},
        {Op::Gt, P::FCMP_OGT, P::ICMP_SGT, P::ICMP_UGT}, {Op::Ge, P::FCMP_OGE, P::ICMP_SGE, P::ICMP_UGE},
        {Op::Eq, P::FCMP_OEQ, P::ICMP_EQ, P::ICMP_EQ},   {Op::Ne, P::FCMP_UNE, P::ICMP_NE, P::ICMP_NE},
    };
    for (const Row& r : rows)
      if (r.op == op) return is_fp(t) ? b_.CreateFCmp(r.f, a, b) : b_.CreateICmp(t == ST::Bool ? r.u : r.s, a, b);
    throw InternalError("llvm emitter: bad comparison");
  }

  llvm::Value* cast(llvm::Value* v, ST from, ST to, int lanes) {
    if (from == to) return v;
    llvm::Type* dt = vec_type(to, lanes);
    if (to == ST::Bool)
      return is_fp(from) ? b_.CreateFCmpUNE(v, llvm::Constant::getNullValue(v->getType()))
                         : b_.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
    if (from == ST::Bool) return is_fp(to) ? b_.CreateUIToFP(v, dt) : b_.CreateZExt(v, dt);
    if (is_fp(from) && is_fp(to)) return b_.CreateFPCast(v, dt);
    if (is_fp(from)) return b_.CreateFPToSI(v, dt);
    if (is_fp(to)) return b_.CreateSIToFP(v, dt);
    return b_.CreateSExtOrTrunc(v, dt);
  }

  // A SLEEF call at this width, else narrower widths, else the scalar form lane by lane.
  llvm::Value* math_call(llvm_jit::MathFn fn, ST t, std::vector<llvm::Value*> args, int lanes) {
    const bool f64 = t == ST::Double;
    if (!is_fp(t)) throw BackendError("llvm emitter: math function on an integer type");
    if (llvm::Function* f = llvm_jit::math_function(m_, fn, f64, lanes)) return b_.CreateCall(f, args);
    for (int w = lanes / 2; w >= 2; w /= 2) {
      llvm::Function* f = llvm_jit::math_function(m_, fn, f64, w);
      if (!f) continue;
      llvm::Value* out = llvm::UndefValue::get(vec_type(t, lanes));
      for (int part = 0; part < lanes / w; ++part) {
        llvm::SmallVector<int, 16> sel;
        for (int i = 0; i < w; ++i) sel.push_back(part * w + i);
        std::vector<llvm::Value*> pa;
        for (llvm::Value* a : args) pa.push_back(b_.CreateShuffleVector(a, sel));
        llvm::Value* r = b_.CreateCall(f, pa);
        for (int i = 0; i < w; ++i) out = b_.CreateInsertElement(out, b_.CreateExtractElement(r, i), part * w + i);
      }
      return out;
    }
    llvm::Function* f = llvm_jit::math_function(m_, fn, f64, 1);
    if (!f) throw BackendError("llvm emitter: no math function for this op");
    if (lanes == 1) return b_.CreateCall(f, args);
    llvm::Value* out = llvm::UndefValue::get(vec_type(t, lanes));
    for (int i = 0; i < lanes; ++i) {
      std::vector<llvm::Value*> sa;
      for (llvm::Value* a : args) sa.push_back(b_.CreateExtractElement(a, i));
      out = b_.CreateInsertElement(out, b_.CreateCall(f, sa), i);
    }
    return out;
  }

  const Program& p_;
  const Kernel& k_;
  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  int vf_;
  llvm::Function* body_ = nullptr;
  llvm::Function* fn_ = nullptr;
  llvm::Value* slots_ = nullptr;  // the kernel's argument array: data pointers, kernel_slots order
  std::string symbol_;
  llvm::Value* status_ = nullptr;
  std::vector<std::vector<Addr>> load_addr_, store_addr_;
  std::vector<std::vector<llvm::Value*>> load_base_, store_base_;
  bool pure_ = false;
  size_t n_outer_ = 0;
  std::vector<int64_t> loop_size_;
  std::vector<int32_t> loop_dim_;
  int64_t outer_numel_ = 1, inner_numel_ = 1, row_ = 1, blocks_ = 1, tasks_ = 1, grain_ = 1;
  bool column_ = false;       // lanes run along the innermost outer loop (choose_column_mode)
  int64_t col_width_ = 1;     // column mode: outer points per task (a multiple of vf_)
  int64_t col_groups_ = 1;    // column mode: tasks along the innermost outer loop
  int32_t nt_store_ = -1;     // stage 0's store that streams, or -1
  int64_t nt_align_ = 1;      // bytes its vector stores are aligned to
  bool nt_active_ = false;    // emitting the aligned vector loop, where that store streams
  bool split_ = false;        // split mode (choose_split_mode)
  int64_t split_chunks_ = 1;
  llvm::Value* split_lo_ = nullptr;  // split mode: the current chunk's range of the first loop
  llvm::Value* split_hi_ = nullptr;
  std::vector<llvm::Value*> arg_best_;
  std::vector<llvm::Value*> scans_;  // per instr of the current inner stage: a CumSum's running sum  // per reduction of the last inner stage: an arg's best value
  std::vector<Acc> accs_;
  std::vector<llvm::Value*> reduced_;
  std::vector<std::vector<llvm::Value*>> stage_values_;
};

}  // namespace

std::vector<int32_t> kernel_slots(const loop::Program& p, const loop::Kernel& k) {
  std::vector<int32_t> used;
  auto use = [&](const Access& a) {
    const int32_t slot = p.plans.at(static_cast<size_t>(a.value)).slot;
    if (std::find(used.begin(), used.end(), slot) == used.end()) used.push_back(slot);
  };
  for (const Stage& s : k.stages) {
    for (const Access& a : s.loads) use(a);
    for (const loop::Store& st : s.stores) use(st.dst);
  }
  return used;
}

void emit_kernel(const loop::Program& p, const loop::Kernel& k, llvm::Module& m, int vector_bits,
                 const std::string& symbol) {
  KernelEmitter(p, k, m, vector_bits, symbol).emit();
}

std::vector<std::string> emit_program(const loop::Program& p, llvm::Module& m, int vector_bits) {
  std::vector<std::string> names;
  for (const Kernel& k : p.kernels) {
    emit_kernel(p, k, m, vector_bits, k.name);
    names.push_back(k.name);
  }
  return names;
}

}  // namespace fastdyn::codegen::llvm_emit
