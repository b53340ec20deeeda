// codegen/llvm/emit_stages.cpp — KernelEmitter's inner stages (see emit_kernel.h): the loops
// that run a stage's points over the inner dims, in row mode (vector body, unrolled accumulators,
// scalar tail; streaming stores peeled to alignment), column mode (lanes are outer points) and
// split mode (one kernel without outer points, its stages cut into chunks over all threads), and
// everything a reduction needs around them: accumulators, the blocked summation cascade, and the
// final pairwise combine of unrolled slots, lanes and chunks. What happens at one point is
// emit_point.cpp's.
#include "codegen/llvm/emit_kernel.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

namespace fastdyn::codegen::llvm_emit::detail {

// A kernel with no outer loop (a full reduction such as x.sum(), or softmax over a whole 1-d
// tensor) would run on one thread. Split mode cuts its first loop into a fixed number of chunks
// (from the size alone, so results do not depend on the thread count) and gives each inner stage
// its own parallel body, which leaves one partial per chunk and reduction in a scratch array on
// the entry function's stack; the entry combines the partials pairwise in chunk order, then runs
// the next stage. Per-outer stages run in the entry itself.
void KernelEmitter::choose_split_mode() {
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
}

void KernelEmitter::emit_split() {
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
        const bool arg = is_arg(red.op);
        reduced_.push_back(b_.CreateLoad(arg ? b_.getInt64Ty() : vec_type(value_type(s, red.instr), 1), cell(arr, b_.getInt64(g))));
        ++g;
      }
  };
  std::vector<llvm::Function*> bodies(k_.stages.size(), nullptr);
  for (size_t s = 0; s < k_.stages.size(); ++s) {
    const Stage& st = k_.stages[s];
    if (st.per_outer) continue;
    llvm::Function* body = begin_body(symbol_ + ".stage" + std::to_string(s));
    bodies[s] = body;
    llvm::Value* ctxp = body->getArg(0);
    llvm::Value* partials = b_.CreateLoad(ptr, b_.CreateGEP(ptr, ctxp, {b_.getInt64(3)}));
    llvm::Value* reduced = b_.CreateLoad(ptr, b_.CreateGEP(ptr, ctxp, {b_.getInt64(4)}));
    for_loop(body->getArg(1), body->getArg(2), b_.getInt64(1), [&](llvm::Value* chunk) {
      compute_bases({});
      load_reduced(reduced, first_red[s]);
      stage_values_.assign(k_.stages.size(), {});
      split_lo_ = b_.CreateSDiv(b_.CreateMul(chunk, loop_len(0)), b_.getInt64(split_chunks_));
      split_hi_ = b_.CreateSDiv(b_.CreateMul(b_.CreateAdd(chunk, b_.getInt64(1)), loop_len(0)), b_.getInt64(split_chunks_));
      emit_inner_stage(s, nullptr, 0);
      split_lo_ = split_hi_ = nullptr;
      for (size_t r = 0; r < st.reductions.size(); ++r) {
        llvm::Value* at = b_.CreateMul(b_.CreateAdd(b_.CreateMul(chunk, b_.getInt64(max_red)), b_.getInt64(static_cast<int64_t>(r))),
                                       b_.getInt64(2));
        const bool arg = is_arg(st.reductions[r].op);
        b_.CreateStore(reduced_[static_cast<size_t>(first_red[s]) + r], cell(partials, b_.CreateAdd(at, b_.getInt64(arg ? 1 : 0))));
        if (arg) b_.CreateStore(arg_best_.at(r), cell(partials, at));
      }
    });
    b_.CreateRetVoid();
  }
  // ---- the entry point ----
  llvm::Function* f = begin_entry();
  slots_ = f->getArg(0);
  status_ = f->getArg(1);
  llvm::Value* partials = b_.CreateAlloca(i64, b_.getInt64(split_chunks_ * max_red * 2));
  llvm::Value* reduced = b_.CreateAlloca(i64, b_.getInt64(std::max<int64_t>(total_red, 1)));
  llvm::Value* pack = b_.CreateAlloca(ptr, b_.getInt64(5));
  const std::array<llvm::Value*, 5> fields{slots_, status_, sizes_, partials, reduced};
  for (size_t i = 0; i < fields.size(); ++i) b_.CreateStore(fields[i], b_.CreateGEP(ptr, pack, {b_.getInt64(static_cast<int64_t>(i))}));
  llvm::FunctionCallee pf = parallel_for();
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
      const bool arg = is_arg(red.op);
      // Pairwise over the chunks, in chunk order (the left operand holds the lower indices).
      using Part = std::pair<llvm::Value*, llvm::Value*>;
      std::vector<Part> parts;
      for (int64_t c = 0; c < split_chunks_; ++c) {
        const int64_t at = (c * max_red + static_cast<int64_t>(r)) * 2;
        llvm::Value* v = b_.CreateLoad(vec_type(vt, 1), cell(partials, b_.getInt64(at)));
        llvm::Value* i = arg ? b_.CreateLoad(i64, cell(partials, b_.getInt64(at + 1))) : nullptr;
        parts.emplace_back(v, i);
      }
      const Part total = pairwise(std::move(parts), [&](const Part& lhs, const Part& rhs) {
        if (!arg) return Part(combine(red.op, vt, lhs.first, rhs.first), nullptr);
        llvm::Value* take = better(red.op, vt, rhs.first, lhs.first);
        return Part(b_.CreateSelect(take, rhs.first, lhs.first), b_.CreateSelect(take, rhs.second, lhs.second));
      });
      b_.CreateStore(arg ? total.second : total.first, cell(reduced, b_.getInt64(first_red[s] + static_cast<int64_t>(r))));
    }
  }
  b_.CreateRetVoid();
}

// Row mode (col_lanes == 0): vectors along the innermost loop, kUnroll accumulators, a scalar
// tail, lanes combined at the end. Column mode: every point is col_lanes outer points wide, one
// accumulator of col_lanes lanes whose lanes are the results.
void KernelEmitter::emit_inner_stage(size_t s, llvm::Value* block, int col_lanes) {
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
    const bool arg = is_arg(red.op);
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
      llvm::Value* first_hi = l == 0 && split_hi_ ? split_hi_ : loop_len(loop);
      if (l + 1 < n_inner_loops) {
        for_loop(first_lo, first_hi, b_.getInt64(1), [&](llvm::Value* i) {
          idx[l] = i;
          nest(l + 1, b_.CreateMul(b_.CreateAdd(flat, i), loop_len(loop + 1)));
        });
        return;
      }
      llvm::Value* lo = first_lo;
      llvm::Value* hi = first_hi;
      if (blocked_) {
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
      if (is_arg(red.op)) {
        llvm::Value* bidx = b_.CreateLoad(vec_type(ST::Long, a.width), a.vidx[0]);
        llvm::Value* none = splat(b_.getInt64(std::numeric_limits<int64_t>::max()), a.width);
        reduced_.push_back(b_.CreateSelect(b_.CreateICmpEQ(bidx, none), splat(b_.getInt64(0), a.width), bidx));
      } else {
        reduced_.push_back(b_.CreateLoad(vec_type(vt, a.width), a.vec[0]));
      }
      continue;
    }
    if (is_arg(red.op)) {
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
    llvm::Value* vec = pairwise(std::move(parts), [&](llvm::Value* l, llvm::Value* r) { return combine(red.op, vt, l, r); });
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
void KernelEmitter::flush(const loop::Reduction& red, Acc& a, ST vt, std::array<llvm::Value*, kUnroll>& from,
           std::array<llvm::Value*, kUnroll>& to) {
  llvm::Type* t = vec_type(vt, a.width);
  for (int u = 0; u < a.slots; ++u) {
    b_.CreateStore(combine(red.op, vt, b_.CreateLoad(t, to[u]), b_.CreateLoad(t, from[u])), to[u]);
    b_.CreateStore(identity(red.op, vt, a.width), from[u]);
  }
}

// A float sum's cascade after an unrolled step ending `done` points into a row: the block
// partials move into the middle ones once per kSumBlock points (at the step that crosses a
// multiple of it), and those into the totals once per kCascade blocks.
void KernelEmitter::flush_blocks(size_t s, llvm::Value* done, int64_t step) {
  auto crossed = [&](int64_t every) { return b_.CreateICmpULT(b_.CreateURem(done, b_.getInt64(every)), b_.getInt64(step)); };
  if_then(crossed(kSumBlock), [&] {
    flush_level(s, false);
    if_then(crossed(kSumBlock * kCascade), [&] { flush_level(s, true); });
  });
}

// One cascade level for every float sum of stage s: the block partials into the middle ones, or
// (to_total) the middle partials into the totals.
void KernelEmitter::flush_level(size_t s, bool to_total) {
  const Stage& st = k_.stages[s];
  for (size_t r = 0; r < st.reductions.size(); ++r) {
    Acc& a = accs_[r];
    if (!a.blk[0]) continue;
    const ST vt = value_type(s, st.reductions[r].instr);
    if (to_total) flush(st.reductions[r], a, vt, a.mid, a.vec);
    else flush(st.reductions[r], a, vt, a.blk, a.mid);
  }
}

// body(blo, bhi) over [lo, hi) in blocks of `block` points; float sums flush their block partial
// after each block and their middle partial after every kCascade blocks (column mode, and row
// mode along a row of static length; see innermost).
void KernelEmitter::cascade(size_t s, llvm::Value* lo, llvm::Value* hi, int64_t block,
             const std::function<void(llvm::Value*, llvm::Value*)>& body) {
  if (!cascaded()) {
    body(lo, hi);
    return;
  }
  auto min = [&](llvm::Value* x, llvm::Value* y) { return b_.CreateSelect(b_.CreateICmpSLT(x, y), x, y); };
  for_loop(lo, hi, b_.getInt64(block * kCascade), [&](llvm::Value* jb2) {
    llvm::Value* e2 = min(b_.CreateAdd(jb2, b_.getInt64(block * kCascade)), hi);
    for_loop(jb2, e2, b_.getInt64(block), [&](llvm::Value* jb) {
      body(jb, min(b_.CreateAdd(jb, b_.getInt64(block)), e2));
      flush_level(s, false);
    });
    flush_level(s, true);
  });
}

// Whether the points of stage s that whole vectors leave over at the end of a row of symbolic
// length run in the row's vector loop as a masked step (lanes_below) rather than in a scalar loop
// after it: the row's vector code then serves its last points too, so the row costs LLVM one copy
// of the stage where vector loop + scalar tail cost two (a dynamic compile paid ~1.5-1.9x the
// static one of the same graph, whose rows of a multiple of the vector width have no tail). It
// needs every access of the stage to be contiguous along the row or the same for every lane (a
// masked load/store then touches exactly the row's points; a gather, a strided access or a store
// every lane writes would need masking of its own), and masked memory operations the target has
// for the element sizes involved: AVX-512 (vector_bits 512 requires BW and VL) has them for every
// size, AVX2 only for 4- and 8-byte elements (LLVM would split smaller ones into a branch per lane).
bool KernelEmitter::masked_remainder(size_t s, size_t loop) const {
  if (!masked_tail_ || vf_ <= 1 || loop::has_scan(k_.stages[s])) return false;
  const bool all_sizes = vf_ >= 16;
  for (const auto* addrs : {&load_addr_[s], &store_addr_[s]})
    for (const Addr& a : *addrs) {
      if (a.dynamic >= 0) return false;
      const int64_t st = stride(a, loop);
      if (st != 1 && (st != 0 || addrs == &store_addr_[s])) return false;
      const size_t bytes = c10::elementSize(a.storage);
      if (!all_sizes && bytes != 4 && bytes != 8) return false;
    }
  return true;
}

// <vf_ x i1>: lane i is on where i < n (n may exceed vf_). Built as the integer (1 << min(n, vf_))
// - 1 and reinterpreted: scalar instructions beside a vector loop's work (a vector compare of the
// lane numbers competed with it for the vector units: 5-8% of a pointwise kernel's time).
llvm::Value* KernelEmitter::lanes_below(llvm::Value* n) {
  llvm::Value* m = b_.CreateSelect(b_.CreateICmpSLT(n, b_.getInt64(vf_)), n, b_.getInt64(vf_));
  llvm::Value* bits = b_.CreateSub(b_.CreateShl(b_.getInt64(1), m), b_.getInt64(1));
  llvm::Type* word = b_.getIntNTy(static_cast<unsigned>(vf_));
  return b_.CreateBitCast(b_.CreateTrunc(bits, word), llvm::FixedVectorType::get(b_.getInt1Ty(), static_cast<unsigned>(vf_)));
}

// Row mode's innermost loop: vector body (blocked, see cascade), then the points left over: a
// masked vector step where masked_remainder allows, else a scalar tail.
void KernelEmitter::innermost(size_t s, std::vector<llvm::Value*>& idx, size_t l, llvm::Value* lo, llvm::Value* hi, llvm::Value* flat) {
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
  // Only rows whose length is a size symbol: a static row keeps its exact code (a static row of 100
  // summed 12% slower with the masked step than with its 4-point scalar tail, measured on Zen 4).
  const bool masked = !llvm::isa<llvm::ConstantInt>(n) && masked_remainder(s, n_outer_ + l);
  // A short row (at most two unrolled steps, known statically: softmax over 64 or 128 keys)
  // gains little from independent accumulators but pays for four copies of the stage's code in
  // compile time; it runs one vector at a time.
  const auto* clo = llvm::dyn_cast<llvm::ConstantInt>(lo);
  const auto* chi = llvm::dyn_cast<llvm::ConstantInt>(hi);
  const bool short_row = clo && chi && chi->getSExtValue() - clo->getSExtValue() <= 2 * int64_t{vf_} * kUnroll;
  // A float sum's cascade: around a row of static length, as a loop nest of blocks (it folds
  // away where the row fits one block, and costs nothing per step); along a row whose length is
  // a size symbol, as a flush inside the unrolled loop, a branch per step (no loop folds away
  // there, and LLVM's instruction selection time grows with the loops it is handed: the nest was
  // a fifth of a dynamic sum's compile; the branch costs a float sum's kernel a few percent).
  const bool flush_in_loop = cascaded() && !loop_sym_[n_outer_ + l].is_constant();
  auto vector_body = [&](llvm::Value* blo, llvm::Value* bhi) {
    llvm::Value* start = blo;
    if (!st.reductions.empty() && !short_row) {
      // kUnroll points per iteration (kUnrollSymbolic for sums along a symbolic row), each into its
      // own accumulators, then single vectors.
      const bool sums_only = std::all_of(st.reductions.begin(), st.reductions.end(),
                                         [](const loop::Reduction& r) { return r.op == loop::ReduceOp::Sum; });
      const int unroll = llvm::isa<llvm::ConstantInt>(n) || !sums_only ? kUnroll : kUnrollSymbolic;
      const int64_t step = static_cast<int64_t>(vf_) * unroll;
      llvm::Value* main_end = b_.CreateAdd(blo, b_.CreateMul(b_.CreateSDiv(b_.CreateSub(bhi, blo), b_.getInt64(step)), b_.getInt64(step)));
      for_loop(blo, main_end, b_.getInt64(step), [&](llvm::Value* j) {
        for (int u = 0; u < unroll; ++u) {
          llvm::Value* ju = b_.CreateAdd(j, b_.getInt64(static_cast<int64_t>(u) * vf_));
          idx[l] = ju;
          run_point(s, vf_, idx, b_.CreateAdd(flat, ju), u);
        }
        if (flush_in_loop) flush_blocks(s, b_.CreateSub(b_.CreateAdd(j, b_.getInt64(step)), blo), step);
      });
      start = main_end;
    }
    for_loop(start, bhi, b_.getInt64(vf_), [&](llvm::Value* j) {
      idx[l] = j;
      if (masked) {
        llvm::Value* left = b_.CreateSub(bhi, j);
        mask_ = lanes_below(left);
        whole_ = b_.CreateICmpSGE(left, b_.getInt64(vf_));
      }
      run_point(s, vf_, idx, b_.CreateAdd(flat, j));
      mask_ = whole_ = nullptr;
    });
  };
  llvm::Value* vector_hi = masked ? hi : vec_end;
  if (flush_in_loop) vector_body(lo, vector_hi);
  else cascade(s, lo, vector_hi, kSumBlock, vector_body);
  if (!masked) scalar_loop(vec_end, hi);
}

}  // namespace fastdyn::codegen::llvm_emit::detail
