// tests/cpp/llvm/test_kernels.h — small kernels written by hand with IRBuilder, shared by the
// JIT engine tests and the two-process cache demo. Each takes a module from new_module() and adds
// one C-ABI function to it.
#pragma once
#include <cstdint>
#include <string>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "codegen/llvm/jit_engine.h"

namespace fastdyn::codegen::llvm_jit::testing {

// A counted loop `for (i = 0; i < n; i += step) body(i)` in `f`, which must be empty; returns
// with the builder after the loop. n is an i64 value; body gets the i64 induction variable.
template <class Body>
void emit_loop(llvm::IRBuilder<>& ir, llvm::Function* f, llvm::Value* n, int64_t step, Body body) {
  llvm::LLVMContext& ctx = ir.getContext();
  auto* entry = llvm::BasicBlock::Create(ctx, "entry", f);
  auto* loop = llvm::BasicBlock::Create(ctx, "loop", f);
  auto* exit = llvm::BasicBlock::Create(ctx, "exit", f);
  ir.SetInsertPoint(entry);
  ir.CreateCondBr(ir.CreateICmpSGT(n, ir.getInt64(0)), loop, exit);
  ir.SetInsertPoint(loop);
  llvm::PHINode* i = ir.CreatePHI(ir.getInt64Ty(), 2, "i");
  i->addIncoming(ir.getInt64(0), entry);
  body(i);
  llvm::Value* next = ir.CreateAdd(i, ir.getInt64(step), "next", /*HasNUW=*/true, /*HasNSW=*/true);
  i->addIncoming(next, ir.GetInsertBlock());
  ir.CreateCondBr(ir.CreateICmpSLT(next, n), loop, exit);
  ir.SetInsertPoint(exit);
}

// void <name>(const float* a, const float* b, float* out, int64_t n): out[i] = a[i] + b[i] + bias.
// A plain scalar loop: the engine's O3 pipeline is what vectorises it.
inline void add_add_kernel(llvm::Module& m, const std::string& name, float bias = 0.0f) {
  llvm::IRBuilder<> ir(m.getContext());
  auto* f32 = ir.getFloatTy();
  auto* fn = llvm::Function::Create(
      llvm::FunctionType::get(ir.getVoidTy(), {ir.getPtrTy(), ir.getPtrTy(), ir.getPtrTy(), ir.getInt64Ty()}, false),
      llvm::Function::ExternalLinkage, name, m);
  for (unsigned a = 0; a < 3; ++a) fn->addParamAttr(a, llvm::Attribute::NoAlias);
  fn->addFnAttr(llvm::Attribute::NoUnwind);
  llvm::Value *pa = fn->getArg(0), *pb = fn->getArg(1), *pout = fn->getArg(2), *n = fn->getArg(3);
  emit_loop(ir, fn, n, 1, [&](llvm::Value* i) {
    llvm::Value* x = ir.CreateLoad(f32, ir.CreateInBoundsGEP(f32, pa, i));
    llvm::Value* y = ir.CreateLoad(f32, ir.CreateInBoundsGEP(f32, pb, i));
    llvm::Value* sum = ir.CreateFAdd(ir.CreateFAdd(x, y), llvm::ConstantFP::get(f32, bias));
    ir.CreateStore(sum, ir.CreateInBoundsGEP(f32, pout, i));
  });
  ir.CreateRetVoid();
}
using AddKernel = void (*)(const float*, const float*, float*, int64_t);

// void <name>(const float* a, float* out, int64_t n, int64_t grain): out[i] = a[i] * 2, split by
// fastdyn_parallel_for into chunks run by <name>_body(ctx = {a, out}, begin, end).
inline void add_parallel_scale_kernel(llvm::Module& m, const std::string& name) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::IRBuilder<> ir(ctx);
  auto* f32 = ir.getFloatTy();
  auto* i64 = ir.getInt64Ty();
  auto* ptr = ir.getPtrTy();
  auto* pair = llvm::StructType::get(ctx, {ptr, ptr});
  auto* body_type = llvm::FunctionType::get(ir.getVoidTy(), {ptr, i64, i64}, false);
  auto* body = llvm::Function::Create(body_type, llvm::Function::InternalLinkage, name + "_body", m);
  {
    llvm::Value *c = body->getArg(0), *begin = body->getArg(1), *end = body->getArg(2);
    auto* entry = llvm::BasicBlock::Create(ctx, "entry", body);
    ir.SetInsertPoint(entry);
    llvm::Value* pa = ir.CreateLoad(ptr, ir.CreateStructGEP(pair, c, 0));
    llvm::Value* pout = ir.CreateLoad(ptr, ir.CreateStructGEP(pair, c, 1));
    auto* loop = llvm::BasicBlock::Create(ctx, "loop", body);
    auto* exit = llvm::BasicBlock::Create(ctx, "exit", body);
    ir.CreateCondBr(ir.CreateICmpSLT(begin, end), loop, exit);
    ir.SetInsertPoint(loop);
    llvm::PHINode* i = ir.CreatePHI(i64, 2, "i");
    i->addIncoming(begin, entry);
    llvm::Value* x = ir.CreateLoad(f32, ir.CreateInBoundsGEP(f32, pa, i));
    ir.CreateStore(ir.CreateFMul(x, llvm::ConstantFP::get(f32, 2.0)), ir.CreateInBoundsGEP(f32, pout, i));
    llvm::Value* next = ir.CreateAdd(i, ir.getInt64(1), "next", true, true);
    i->addIncoming(next, loop);
    ir.CreateCondBr(ir.CreateICmpSLT(next, end), loop, exit);
    ir.SetInsertPoint(exit);
    ir.CreateRetVoid();
  }
  llvm::FunctionCallee parallel_for = m.getOrInsertFunction(
      "fastdyn_parallel_for", llvm::FunctionType::get(ir.getVoidTy(), {i64, i64, ptr, ptr}, false));
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(ir.getVoidTy(), {ptr, ptr, i64, i64}, false),
                                    llvm::Function::ExternalLinkage, name, m);
  ir.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", fn));
  llvm::Value* c = ir.CreateAlloca(pair);
  ir.CreateStore(fn->getArg(0), ir.CreateStructGEP(pair, c, 0));
  ir.CreateStore(fn->getArg(1), ir.CreateStructGEP(pair, c, 1));
  ir.CreateCall(parallel_for, {fn->getArg(2), fn->getArg(3), body, c});
  ir.CreateRetVoid();
}
using ParallelScaleKernel = void (*)(const float*, float*, int64_t, int64_t);

}  // namespace fastdyn::codegen::llvm_jit::testing
