// codegen/loop/loop_ir.cpp — op tables and the printer of the loop IR (the kernel-cache key).
#include "codegen/loop/loop_ir.h"

#include "runtime/format.h"

#include "runtime/errors.h"

#include <c10/util/Exception.h>

#include <set>

namespace fastdyn::codegen::loop {
namespace {

struct OpRow {
  const char* name;
  int arity;
};
const OpRow kOps[] = {
#define FD_X(name, arity) {#name, arity},
    FD_LOOP_OPS(FD_X)
#undef FD_X
};

const char* type_name(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return "f32";
    case c10::ScalarType::Double: return "f64";
    case c10::ScalarType::BFloat16: return "bf16";
    case c10::ScalarType::Half: return "f16";
    case c10::ScalarType::Long: return "i64";
    case c10::ScalarType::Int: return "i32";
    case c10::ScalarType::Bool: return "b8";
    default: return c10::toString(t);
  }
}

void print_index(Text& os, const AffineIndex& ix, size_t n_outer) {
  bool any = false;
  for (size_t d = 0; d < ix.coef.size(); ++d) {
    int64_t c = ix.coef[d];
    if (c == 0) continue;
    if (any) os << (c < 0 ? " - " : " + ");
    else if (c < 0) os << "-";
    int64_t m = c < 0 ? -c : c;
    if (m != 1) os << m << "*";
    os << (d < n_outer ? "o" : "i") << (d < n_outer ? d : d - n_outer);
    any = true;
  }
  if (ix.dynamic >= 0) {
    if (any) os << " + ";
    os << "%" << ix.dynamic;
    any = true;
  }
  if (ix.constant != 0 || !any) {
    if (any) os << (ix.constant < 0 ? " - " : " + ") << (ix.constant < 0 ? -ix.constant : ix.constant);
    else os << ix.constant;
  }
}

void print_access(Text& os, const Access& a, size_t n_outer) {
  os << "v" << a.value << "[";
  for (size_t k = 0; k < a.index.size(); ++k) {
    if (k) os << ", ";
    print_index(os, a.index[k], n_outer);
  }
  os << "]";
}

void print_meta(Text& os, const TensorMeta& m) {
  os << type_name(m.dtype) << "[";
  for (size_t i = 0; i < m.sizes.size(); ++i) os << (i ? ", " : "") << m.sizes[i];
  os << "]{";
  for (size_t i = 0; i < m.strides.size(); ++i) os << (i ? ", " : "") << m.strides[i];
  os << "}";
  if (m.storage_offset) os << "+" << m.storage_offset;
}

void print_dims(Text& os, const char* what, const std::vector<int64_t>& v) {
  os << what << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
}

void print_kernel_into(Text& os, const Kernel& k) {
  os << "kernel " << k.name << " ";
  print_dims(os, "outer", k.outer);
  os << " ";
  print_dims(os, "inner", k.inner);
  os << ":\n";
  const size_t n_outer = k.outer.size();
  int red = 0;
  for (size_t s = 0; s < k.stages.size(); ++s) {
    const Stage& st = k.stages[s];
    os << "  stage " << s << (st.per_outer ? " per_outer" : " inner") << ":\n";
    for (size_t i = 0; i < st.instrs.size(); ++i) {
      const Instr& in = st.instrs[i];
      os << "    %" << i << " = " << op_name(in.op) << " " << type_name(in.type);
      switch (in.op) {
        case Op::Load: os << " "; print_access(os, st.loads.at(static_cast<size_t>(in.a)), n_outer); break;
        case Op::Const:
        case Op::Count: {
          Text v;
          v.precision(17);
          v << in.value;
          os << " " << v.str();
          break;
        }
        case Op::Reduced: os << " red" << in.a; break;
        case Op::StageValue: os << " s" << in.a << ".%" << in.b; break;
        default:
          for (int32_t o : {in.a, in.b, in.c})
            if (o >= 0) os << " %" << o;
      }
      os << "\n";
    }
    for (const Store& stv : st.stores) {
      os << "    store ";
      print_access(os, stv.dst, n_outer);
      os << " = %" << stv.instr << "\n";
    }
    for (const Reduction& r : st.reductions)
      os << "    red" << red++ << " = " << reduce_name(r.op) << " " << type_name(r.type) << " %" << r.instr << "\n";
  }
}

}  // namespace

const char* op_name(Op op) { return kOps[static_cast<size_t>(op)].name; }
int op_arity(Op op) { return kOps[static_cast<size_t>(op)].arity; }

const char* reduce_name(ReduceOp r) {
  switch (r) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::ArgMax: return "argmax";
    case ReduceOp::ArgMin: return "argmin";
    case ReduceOp::MaxLoose: return "max_loose";
  }
  return "?";
}

c10::ScalarType compute_type(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
    case c10::ScalarType::BFloat16:
    case c10::ScalarType::Half: return c10::ScalarType::Float;
    case c10::ScalarType::Double:
    case c10::ScalarType::Long:
    case c10::ScalarType::Int:
    case c10::ScalarType::Bool: return t;
    default: return c10::ScalarType::Undefined;
  }
}

bool has_scan(const Stage& s) {
  for (const Instr& in : s.instrs)
    if (in.op == Op::CumSum) return true;
  return false;
}

std::string print_kernel(const Program&, const Kernel& k) {
  Text os;
  print_kernel_into(os, k);
  return os.str();
}

std::string print_program(const Program& p) {
  Text os;
  // Every value a kernel touches, with the metadata (strides, offset) that its addresses use.
  std::set<ValueId> used;
  for (const Kernel& k : p.kernels)
    for (const Stage& s : k.stages) {
      for (const Access& a : s.loads) used.insert(a.value);
      for (const Store& st : s.stores) used.insert(st.dst.value);
    }
  os << "values:\n";
  for (ValueId v : used) {
    os << "  v" << v << ": ";
    print_meta(os, p.graph.meta(v));
    if (static_cast<size_t>(v) < p.plans.size()) {
      const ValuePlan& pl = p.plans[static_cast<size_t>(v)];
      static const char* kKinds[] = {"none", "input", "buffer", "extern", "alias"};
      os << " " << kKinds[static_cast<int>(pl.kind)] << " s" << pl.slot;
      if (pl.kind == ValuePlan::Kind::Alias) {
        os << " of v" << pl.root << " ";
        print_meta(os, p.graph.meta(pl.root));
      }
    }
    os << "\n";
  }
  for (const Step& s : p.steps) {
    if (s.kind == Step::Kind::Extern) {
      os << "extern " << print_node(p.graph, p.graph.nodes.at(static_cast<size_t>(s.index))) << "\n";
    } else {
      print_kernel_into(os, p.kernels.at(static_cast<size_t>(s.index)));
    }
  }
  os << "return (";
  for (size_t i = 0; i < p.graph.outputs.size(); ++i) os << (i ? ", " : "") << "v" << p.graph.outputs[i];
  os << ")\n";
  return os.str();
}

}  // namespace fastdyn::codegen::loop
