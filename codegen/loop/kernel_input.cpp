// codegen/loop/kernel_input.cpp — see kernel_input.h.
#include "codegen/loop/kernel_input.h"

#include "runtime/errors.h"

#include <algorithm>

namespace fastdyn::codegen::loop {

using shapes::SizeExpr;

// An expression the kernel can compute from its size parameters: not a constant, and a polynomial
// over size symbols (a // or % of sizes stays a number of the binding).
bool computable(const SizeExpr& e) {
  if (e.is_constant()) return false;
  for (const SizeExpr::TermView& t : e.terms())
    for (const auto& atom : t.atoms)
      if (atom.first->kind != shapes::Atom::Kind::Symbol) return false;
  return true;
}

namespace {

// e where it is computable and gives `value` at the binding, else the number: an expression a
// pass left stale can only cost a kernel's reuse across sizes, never a result.
SizeExpr checked(const SizeExpr& e, int64_t value, const std::vector<int64_t>& binding) {
  return !binding.empty() && computable(e) && e.evaluate(binding) == value ? e : SizeExpr(value);
}

Addr address_of(const Program& p, const Kernel& k, const Access& a) {
  const TensorMeta& m = p.graph.meta(a.value);
  const ValuePlan& pl = p.plans.at(static_cast<size_t>(a.value));
  FD_CHECK(pl.slot >= 0, "kernel input: v" + std::to_string(a.value) + " has no buffer slot");
  Addr r;
  r.slot = pl.slot;
  r.storage = m.dtype;
  r.host = m.device.is_cpu();
  r.stride.assign(static_cast<size_t>(k.dims()), 0);
  r.sym_stride.assign(static_cast<size_t>(k.dims()), 0);
  if (pl.kind == ValuePlan::Kind::Alias) {
    const TensorMeta& root = p.graph.meta(pl.root);
    r.base = m.storage_offset - root.storage_offset;
    r.sym_base = m.offset_expr() - root.offset_expr();
  }
  for (size_t row = 0; row < a.index.size(); ++row) {
    const loop::AffineIndex& ix = a.index[row];
    const int64_t s = m.strides[row];
    const SizeExpr sym_s = m.stride_expr(row);
    r.base += ix.constant * s;
    r.sym_base = r.sym_base + ix.constant_expr() * sym_s;
    for (size_t d = 0; d < ix.coef.size(); ++d) {
      r.stride[d] += ix.coef[d] * s;
      if (ix.coef[d] != 0) r.sym_stride[d] = r.sym_stride[d] + SizeExpr(ix.coef[d]) * sym_s;
    }
    if (ix.dynamic >= 0) {
      r.dynamic = ix.dynamic;
      r.dyn_stride = s;
      r.dyn_size = m.sizes[row];
      r.sym_dyn_stride = sym_s;
      r.sym_dyn_size = m.size_expr(row);
    }
  }
  const std::vector<int64_t>& binding = p.graph.binding;
  r.sym_base = checked(r.sym_base, r.base, binding);
  for (size_t d = 0; d < r.stride.size(); ++d) r.sym_stride[d] = checked(r.sym_stride[d], r.stride[d], binding);
  r.sym_dyn_stride = checked(r.sym_dyn_stride, r.dyn_stride, binding);
  r.sym_dyn_size = checked(r.sym_dyn_size, r.dyn_size, binding);
  return r;
}

}  // namespace

std::vector<SizeExpr> domain_exprs(const KernelInput& in) {
  const Kernel& k = *in.kernel;
  std::vector<int64_t> sizes = k.outer;
  sizes.insert(sizes.end(), k.inner.begin(), k.inner.end());
  std::vector<SizeExpr> out(sizes.begin(), sizes.end());
  if (in.binding.empty()) return out;
  auto visit = [&](const Access& a, const std::vector<SizeExpr>& value_sizes) {
    if (value_sizes.empty()) return;
    for (size_t row = 0; row < a.index.size(); ++row) {
      const AffineIndex& ix = a.index[row];
      if (ix.constant != 0 || ix.dynamic >= 0) continue;
      int64_t dim = -1;
      for (size_t d = 0; d < ix.coef.size(); ++d) {
        if (ix.coef[d] == 0) continue;
        dim = dim < 0 && ix.coef[d] == 1 ? static_cast<int64_t>(d) : -2;
      }
      if (dim < 0 || !out[static_cast<size_t>(dim)].is_constant()) continue;
      const SizeExpr& e = value_sizes[row];
      if (computable(e) && e.evaluate(in.binding) == sizes[static_cast<size_t>(dim)]) out[static_cast<size_t>(dim)] = e;
    }
  };
  for (size_t s = 0; s < k.stages.size(); ++s) {
    const Stage& st = k.stages[s];
    for (size_t w = 0; w < st.stores.size(); ++w) visit(st.stores[w].dst, in.store_sizes[s][w]);
    for (size_t l = 0; l < st.loads.size(); ++l) visit(st.loads[l], in.load_sizes[s][l]);
  }
  return out;
}

std::vector<int32_t> kernel_slots(const Program& p, const Kernel& k) {
  std::vector<int32_t> used;
  auto use = [&](const Access& a) {
    const int32_t slot = p.plans.at(static_cast<size_t>(a.value)).slot;
    if (std::find(used.begin(), used.end(), slot) == used.end()) used.push_back(slot);
  };
  for (const Stage& s : k.stages) {
    for (const Access& a : s.loads) use(a);
    for (const Store& st : s.stores) use(st.dst);
  }
  return used;
}

KernelInput kernel_input(const Program& p, const Kernel& k) {
  KernelInput in;
  in.kernel = &k;
  in.binding = p.graph.binding;
  // Buffers are addressed through the kernel's own argument array (see kernel_slots).
  const std::vector<int32_t> used = kernel_slots(p, k);
  auto addr = [&](const Access& a) {
    Addr r = address_of(p, k, a);
    r.slot = static_cast<int32_t>(std::find(used.begin(), used.end(), r.slot) - used.begin());
    return r;
  };
  for (const Stage& st : k.stages) {
    in.loads.emplace_back();
    in.stores.emplace_back();
    in.load_sizes.emplace_back();
    in.store_sizes.emplace_back();
    for (const Access& a : st.loads) {
      in.loads.back().push_back(addr(a));
      in.load_sizes.back().push_back(p.graph.meta(a.value).sym_sizes);
    }
    for (const Store& w : st.stores) {
      in.stores.back().push_back(addr(w.dst));
      in.store_sizes.back().push_back(p.graph.meta(w.dst.value).sym_sizes);
    }
  }
  if (!k.stages.empty())
    for (const Store& w : k.stages[0].stores) in.store_bytes.push_back(p.graph.meta(w.dst.value).nbytes());
  return in;
}

}  // namespace fastdyn::codegen::loop
