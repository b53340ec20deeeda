// codegen/llvm/emit_point.cpp — KernelEmitter at one point, lanes wide (see emit_kernel.h): the
// code of every instr (the per-Op switch; transcendental ops through one table), element offsets
// with gathered indices checked, loads and stores (contiguous, uniform, or lane by lane; widened
// from and narrowed to their storage type), a reduction's update at the point, and the small
// builders underneath: LLVM types, constants, identities and combines of reductions, casts,
// comparisons, shifts and math calls. The same code serves any lane count: 1 for scalar tails and
// per-outer stages, the host's vector width for vector bodies.
#include "codegen/llvm/emit_kernel.h"

#include "codegen/llvm/inline_math.h"
#include "runtime/errors.h"

#include <llvm/Analysis/VectorUtils.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>

namespace fastdyn::codegen::llvm_emit::detail {

llvm::Type* KernelEmitter::scalar_type(ST t) {
  switch (t) {
    case ST::Float: return b_.getFloatTy();
    case ST::Double: return b_.getDoubleTy();
    case ST::Long: return b_.getInt64Ty();
    case ST::Int: return b_.getInt32Ty();
    case ST::Bool: return b_.getInt1Ty();
    default: throw BackendError(std::string("llvm emitter: no compute type for ") + c10::toString(t));
  }
}

llvm::Type* KernelEmitter::storage_type(ST t) {
  switch (t) {
    case ST::BFloat16: return b_.getBFloatTy();
    case ST::Half: return b_.getHalfTy();
    case ST::Bool: return b_.getInt8Ty();
    default: return scalar_type(t);
  }
}

llvm::Type* KernelEmitter::vec_type(ST t, int lanes) {
  return lanes_of(scalar_type(t), lanes);
}

llvm::Value* KernelEmitter::splat(llvm::Value* v, int lanes) {
  if (lanes == 1 || v->getType()->isVectorTy()) return v;
  return b_.CreateVectorSplat(static_cast<unsigned>(lanes), v);
}

// The i64 vector {0, step, 2 * step, ...}: each lane's offset from lane 0.
llvm::Constant* KernelEmitter::lane_steps(int lanes, int64_t step) {
  llvm::SmallVector<llvm::Constant*, 16> steps;
  for (int i = 0; i < lanes; ++i) steps.push_back(b_.getInt64(static_cast<uint64_t>(i * step)));
  return llvm::ConstantVector::get(steps);
}

llvm::Value* KernelEmitter::constant(double v, ST t, int lanes) {
  llvm::Type* s = scalar_type(t);
  llvm::Constant* c = is_fp(t) ? llvm::ConstantFP::get(s, v)
                      : t == ST::Bool ? llvm::ConstantInt::get(s, v != 0)
                      : llvm::ConstantInt::get(s, static_cast<uint64_t>(static_cast<int64_t>(v)), true);
  return lanes == 1 ? static_cast<llvm::Value*>(c) : llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(lanes), c);
}

llvm::Value* KernelEmitter::identity(ReduceOp op, ST t, int lanes) {
  const bool fp = is_fp(t);
  switch (op) {
    case ReduceOp::Sum: return constant(0, t, lanes);
    case ReduceOp::Prod: return constant(1, t, lanes);
    case ReduceOp::Max:
    case ReduceOp::MaxLoose:
    case ReduceOp::ArgMax:
      return fp ? constant(-INFINITY, t, lanes) : int_limit(t, lanes, true);
    case ReduceOp::Min:
    case ReduceOp::ArgMin:
      return fp ? constant(INFINITY, t, lanes) : int_limit(t, lanes, false);
  }
  return nullptr;
}

llvm::Value* KernelEmitter::int_limit(ST t, int lanes, bool lowest) {
  unsigned bits = scalar_type(t)->getIntegerBitWidth();
  llvm::APInt v = lowest ? llvm::APInt::getSignedMinValue(bits) : llvm::APInt::getSignedMaxValue(bits);
  llvm::Constant* c = llvm::ConstantInt::get(scalar_type(t), v);
  return lanes == 1 ? static_cast<llvm::Value*>(c) : llvm::ConstantVector::getSplat(llvm::ElementCount::getFixed(lanes), c);
}

llvm::Value* KernelEmitter::intrinsic(llvm::Intrinsic::ID id, llvm::ArrayRef<llvm::Value*> args) {
  return b_.CreateIntrinsic(id, {args[0]->getType()}, args);
}

llvm::Value* KernelEmitter::combine(ReduceOp op, ST t, llvm::Value* a, llvm::Value* b) {
  const bool fp = is_fp(t);
  switch (op) {
    case ReduceOp::Sum: return fp ? b_.CreateFAdd(a, b) : b_.CreateAdd(a, b);
    case ReduceOp::Prod: return fp ? b_.CreateFMul(a, b) : b_.CreateMul(a, b);
    case ReduceOp::Max: return intrinsic(fp ? llvm::Intrinsic::maximum : llvm::Intrinsic::smax, {a, b});
    case ReduceOp::Min: return intrinsic(fp ? llvm::Intrinsic::minimum : llvm::Intrinsic::smin, {a, b});
    case ReduceOp::MaxLoose:  // a > b ? a : b, x86's max instruction exactly
      return fp ? b_.CreateSelect(b_.CreateFCmpOGT(a, b), a, b) : intrinsic(llvm::Intrinsic::smax, {a, b});
    default: throw InternalError("llvm emitter: combine of an arg reduction");
  }
}

// Strictly better for argmax/argmin; a NaN beats any number (ATen returns the first NaN).
llvm::Value* KernelEmitter::better(ReduceOp op, ST t, llvm::Value* v, llvm::Value* best) {
  if (!is_fp(t)) return op == ReduceOp::ArgMax ? b_.CreateICmpSGT(v, best) : b_.CreateICmpSLT(v, best);
  llvm::Value* cmp = op == ReduceOp::ArgMax ? b_.CreateFCmpOGT(v, best) : b_.CreateFCmpOLT(v, best);
  return b_.CreateOr(cmp, b_.CreateAnd(b_.CreateFCmpUNO(v, v), b_.CreateFCmpORD(best, best)));
}

llvm::Value* KernelEmitter::same(ST t, llvm::Value* v, llvm::Value* best) {
  if (!is_fp(t)) return b_.CreateICmpEQ(v, best);
  return b_.CreateOr(b_.CreateFCmpOEQ(v, best), b_.CreateAnd(b_.CreateFCmpUNO(v, v), b_.CreateFCmpUNO(best, best)));
}

// Element offset of an access at the current point (lanes wide when lanes > 1 and not unit/0).
llvm::Value* KernelEmitter::element_offset(const Addr& a, llvm::Value* base, const std::vector<llvm::Value*>& idx, int lanes,
                            const std::vector<llvm::Value*>& vals, bool& contiguous, bool& uniform) {
  llvm::Value* off = base;
  const size_t n_inner = idx.size();
  // Lanes are consecutive points of the innermost loop (row mode) or of the lane loop, the
  // innermost outer loop (column mode; its index is in `base`).
  int64_t lane_stride = column_ ? stride(a, n_outer_ - 1) : 0;
  llvm::Value* lane_stride_v = column_ ? stride_v(a, n_outer_ - 1) : nullptr;
  for (size_t l = 0; l < n_inner; ++l) {
    int64_t s = stride(a, n_outer_ + l);
    if (s != 0) off = b_.CreateAdd(off, b_.CreateMul(idx[l], stride_v(a, n_outer_ + l)));
    if (l + 1 == n_inner && !column_) {
      lane_stride = s;
      lane_stride_v = stride_v(a, n_outer_ + l);
    }
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
    llvm::Value* size = splat(this->size(a.sym_dyn_size, a.dyn_size), dyn_lanes);
    llvm::Value* bad = b_.CreateICmpUGE(dyn, size);
    llvm::Value* any = dyn_lanes == 1 ? bad : b_.CreateOrReduce(bad);
    llvm::Value* old = b_.CreateLoad(b_.getInt32Ty(), status_);
    b_.CreateStore(b_.CreateSelect(any, b_.getInt32(1), old), status_);
    dyn = b_.CreateSelect(bad, splat(b_.getInt64(0), dyn_lanes), dyn);
    dyn = b_.CreateMul(dyn, splat(this->size(a.sym_dyn_stride, a.dyn_stride), dyn_lanes));
  }
  contiguous = lanes > 1 && lane_stride == 1 && (!dyn || dyn_uniform);
  uniform = lanes > 1 && lane_stride == 0 && (!dyn || dyn_uniform);
  if (lanes == 1 || contiguous || uniform) return dyn ? b_.CreateAdd(off, dyn) : off;
  if (dyn_uniform) dyn = splat(dyn, lanes);
  // Lane i is i strides along: a constant vector, or the run-time stride times 0, 1, 2, ...
  llvm::Value* steps = !lane_stride_v || llvm::isa<llvm::ConstantInt>(lane_stride_v) ? lane_steps(lanes, lane_stride)
                                                                  : b_.CreateMul(splat(lane_stride_v, lanes), lane_steps(lanes, 1));
  llvm::Value* v = b_.CreateAdd(splat(off, lanes), steps);
  return dyn ? b_.CreateAdd(v, dyn) : v;
}

llvm::Value* KernelEmitter::slot_ptr(int32_t slot) {
  auto* ptr = llvm::PointerType::get(ctx_, 0);
  // NB: kernels never write the slot array, and saying so lets LLVM hoist these loads out of
  // loops whose stores it could not otherwise prove to miss the array.
  llvm::LoadInst* load = b_.CreateLoad(ptr, b_.CreateGEP(ptr, slots_, {b_.getInt64(slot)}));
  load->setMetadata(llvm::LLVMContext::MD_invariant_load, llvm::MDNode::get(ctx_, {}));
  return load;
}

llvm::Value* KernelEmitter::widen(llvm::Value* raw, ST storage, ST compute, int lanes) {
  switch (storage) {
    case ST::BFloat16:
    case ST::Half: return b_.CreateFPExt(raw, vec_type(ST::Float, lanes));
    case ST::Bool: return b_.CreateICmpNE(raw, llvm::Constant::getNullValue(raw->getType()));
    default: (void)compute; return raw;
  }
}

llvm::Value* KernelEmitter::narrow(llvm::Value* v, ST storage, int lanes) {
  switch (storage) {
    case ST::BFloat16:
    case ST::Half: return b_.CreateFPTrunc(v, lanes_of(storage_type(storage), lanes));
    case ST::Bool: return b_.CreateZExt(v, lanes_of(b_.getInt8Ty(), lanes));
    default: return v;
  }
}

llvm::Value* KernelEmitter::load(const Addr& a, llvm::Value* base, const std::vector<llvm::Value*>& idx, int lanes,
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
    const llvm::Align align(et->getPrimitiveSizeInBits() / 8);
    llvm::Value* at = b_.CreateGEP(et, p, {off});
    // A masked step's lanes past the row read as 0 (any value would do: lowerings divide integers
    // only by constants, and what those lanes compute is never stored or accumulated).
    llvm::Value* ld = mask_ ? static_cast<llvm::Value*>(b_.CreateMaskedLoad(vt, at, align, mask_, llvm::Constant::getNullValue(vt)))
                            : b_.CreateAlignedLoad(vt, at, llvm::MaybeAlign(align));
    return widen(ld, a.storage, compute, lanes);
  }
  llvm::Value* v = llvm::UndefValue::get(vec_type(compute, lanes));
  for (int i = 0; i < lanes; ++i) {
    llvm::Value* e = b_.CreateLoad(et, b_.CreateGEP(et, p, {b_.CreateExtractElement(off, i)}));
    v = b_.CreateInsertElement(v, widen(e, a.storage, compute, 1), i);
  }
  return v;
}

void KernelEmitter::store(const Addr& a, llvm::Value* base, const std::vector<llvm::Value*>& idx, int lanes,
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
    const llvm::Align align(et->getPrimitiveSizeInBits() / 8);
    llvm::Value* at = b_.CreateGEP(et, p, {off});
    if (!mask_) {
      b_.CreateAlignedStore(v, at, llvm::MaybeAlign(align));
      return;
    }
    // A masked store of a whole vector is several times slower than a plain one on some CPUs
    // (AMD Zen 4: the loop of a pointwise kernel lost 12-15%); the plain one serves every step
    // but a row's last, a branch the predictor always gets right.
    auto* plain = llvm::BasicBlock::Create(ctx_, "store.whole", fn_);
    auto* part = llvm::BasicBlock::Create(ctx_, "store.part", fn_);
    auto* done = llvm::BasicBlock::Create(ctx_, "store.done", fn_);
    b_.CreateCondBr(whole_, plain, part);
    b_.SetInsertPoint(plain);
    b_.CreateAlignedStore(v, at, llvm::MaybeAlign(align));
    b_.CreateBr(done);
    b_.SetInsertPoint(part);
    b_.CreateMaskedStore(v, at, align, mask_);
    b_.CreateBr(done);
    b_.SetInsertPoint(done);
    return;
  }
  FD_CHECK(!mask_, "llvm emitter: a masked step with a store that is not contiguous");
  if (uniform) {  // every lane writes the same element: the last lane wins, as in the scalar loop
    b_.CreateStore(b_.CreateExtractElement(v, lanes - 1), b_.CreateGEP(et, p, {off}));
    return;
  }
  for (int i = 0; i < lanes; ++i)
    b_.CreateStore(b_.CreateExtractElement(v, i), b_.CreateGEP(et, p, {b_.CreateExtractElement(off, i)}));
}

// Evaluates stage s at the current point; `flat` is the flat inner index (arg reductions).
void KernelEmitter::run_point(size_t s, int lanes, const std::vector<llvm::Value*>& idx, llvm::Value* flat, int slot) {
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
    if (is_arg(red.op)) {
      const bool tail = lanes == 1 && !column_;  // row mode's scalar tail has its own accumulator
      llvm::Value* accp = tail ? a.sc : a.vec[slot];
      llvm::Value* idxp = tail ? a.sidx : a.vidx[slot];
      llvm::Value* best = b_.CreateLoad(vec_type(vt, lanes), accp);
      llvm::Value* bi = b_.CreateLoad(vec_type(ST::Long, lanes), idxp);
      llvm::Value* here = splat(flat, lanes);  // column mode: every lane is at the same inner point
      if (lanes > 1 && !column_) {
        here = b_.CreateAdd(splat(flat, lanes), lane_steps(lanes, 1));
      }
      llvm::Value* take = better(red.op, vt, x, best);
      if (mask_) take = b_.CreateAnd(take, mask_);
      b_.CreateStore(b_.CreateSelect(take, x, best), accp);
      b_.CreateStore(b_.CreateSelect(take, here, bi), idxp);
      continue;
    }
    llvm::Value* accp = lanes == 1 && !column_ ? a.sc : (a.blk[slot] ? a.blk[slot] : a.vec[slot]);
    // A masked step's lanes past the row add the identity: the select is on the new value, off
    // the accumulator's chain from one step to the next.
    if (mask_) x = b_.CreateSelect(mask_, x, identity(red.op, vt, lanes));
    b_.CreateStore(combine(red.op, vt, b_.CreateLoad(vec_type(vt, lanes), accp), x), accp);
  }
}

llvm::Value* KernelEmitter::instr(size_t s, const Instr& in, int lanes, const std::vector<llvm::Value*>& idx,
                   const std::vector<llvm::Value*>& vals) {
  auto arg = [&](int32_t i) { return vals.at(static_cast<size_t>(i)); };
  const ST t = in.type;
  const bool fp = is_fp(t);
  switch (in.op) {
    case Op::Load:
      return load(load_addr_[s][static_cast<size_t>(in.a)], load_base_[s][static_cast<size_t>(in.a)], idx, lanes, vals, t);
    case Op::Const: return constant(in.value, t, lanes);
    case Op::Count: {
      shapes::SizeExpr e = 1;
      for (size_t l = n_outer_; l < loop_sym_.size(); ++l) e = e * loop_sym_[l];
      llvm::Value* n = size(e, e.is_constant() ? static_cast<int64_t>(in.value) : kForgotten);
      return splat(fp ? b_.CreateSIToFP(n, scalar_type(t)) : b_.CreateSExtOrTrunc(n, scalar_type(t)), lanes);
    }
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
    case Op::Exp: case Op::Expm1: case Op::Log: case Op::Log1p: case Op::Log2: case Op::Log10:
    case Op::Sin: case Op::Cos: case Op::Tan: case Op::Tanh: case Op::Sinh: case Op::Cosh:
    case Op::Asin: case Op::Acos: case Op::Atan: case Op::Erf: case Op::Erfc: case Op::Pow: case Op::Atan2:
      return math_op(in, lanes, vals);
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
llvm::Value* KernelEmitter::frem_lanes(llvm::Value* a, llvm::Value* b, int lanes) {
  if (lanes == 1) return b_.CreateFRem(a, b);
  llvm::Value* out = llvm::UndefValue::get(a->getType());
  for (int i = 0; i < lanes; ++i)
    out = b_.CreateInsertElement(out, b_.CreateFRem(b_.CreateExtractElement(a, i), b_.CreateExtractElement(b, i)), i);
  return out;
}

// ATen's shifts: a count outside [0, bits) shifts everything out (Shl: 0; Shr: the sign fill).
llvm::Value* KernelEmitter::shift(Op op, ST t, llvm::Value* a, llvm::Value* n) {
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

llvm::Value* KernelEmitter::compare(Op op, ST t, llvm::Value* a, llvm::Value* b) {
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

llvm::Value* KernelEmitter::cast(llvm::Value* v, ST from, ST to, int lanes) {
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

// The transcendental ops: float32 exp, tanh and erf are inline code (inline_math.h: no call, no spills
// in the loop), the others a SLEEF call (math_call).
llvm::Value* KernelEmitter::math_op(const Instr& in, int lanes, const std::vector<llvm::Value*>& vals) {
  using llvm_jit::MathFn;
  static const std::pair<Op, MathFn> kTable[] = {
      {Op::Exp, MathFn::Exp},     {Op::Expm1, MathFn::Expm1}, {Op::Log, MathFn::Log},   {Op::Log1p, MathFn::Log1p},
      {Op::Log2, MathFn::Log2},   {Op::Log10, MathFn::Log10}, {Op::Sin, MathFn::Sin},   {Op::Cos, MathFn::Cos},
      {Op::Tan, MathFn::Tan},     {Op::Tanh, MathFn::Tanh},   {Op::Sinh, MathFn::Sinh}, {Op::Cosh, MathFn::Cosh},
      {Op::Asin, MathFn::Asin},   {Op::Acos, MathFn::Acos},   {Op::Atan, MathFn::Atan}, {Op::Erf, MathFn::Erf},
      {Op::Erfc, MathFn::Erfc},   {Op::Pow, MathFn::Pow},     {Op::Atan2, MathFn::Atan2},
  };
  llvm::Value* x = vals.at(static_cast<size_t>(in.a));
  if (in.type == ST::Float && in.op == Op::Exp) return llvm_jit::emit_exp_f32(b_, x);
  if (in.type == ST::Float && in.op == Op::Tanh) return llvm_jit::emit_tanh_f32(b_, x);
  if (in.type == ST::Float && in.op == Op::Erf) return llvm_jit::emit_erf_f32(b_, x);
  std::vector<llvm::Value*> args{x};
  if (loop::op_arity(in.op) == 2) args.push_back(vals.at(static_cast<size_t>(in.b)));
  for (const auto& [op, fn] : kTable)
    if (op == in.op) return math_call(fn, in.type, std::move(args), lanes);
  throw InternalError(std::string("llvm emitter: no math function for ") + loop::op_name(in.op));
}

// A SLEEF call at this width, else narrower widths, else the scalar form lane by lane.
llvm::Value* KernelEmitter::math_call(llvm_jit::MathFn fn, ST t, std::vector<llvm::Value*> args, int lanes) {
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

}  // namespace fastdyn::codegen::llvm_emit::detail
