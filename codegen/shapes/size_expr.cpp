// codegen/shapes/size_expr.cpp — see size_expr.h.
#include "codegen/shapes/size_expr.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <stdexcept>

namespace fastdyn::codegen::shapes {
namespace {

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw std::overflow_error("size expression: integer overflow");
  return r;
}

int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw std::overflow_error("size expression: integer overflow");
  return r;
}

// Python's // and % on integers (floor; the remainder has the divisor's sign). b != 0.
int64_t py_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t py_mod(int64_t a, int64_t b) { return a - py_floordiv(a, b) * b; }

// An operand of // or % in an atom's text: a sum in parentheses, so the text reads as it computes.
std::string operand(const SizeExpr& e) {
  const std::string t = e.str();
  return t.find(' ') == std::string::npos ? t : "(" + t + ")";
}

std::optional<int64_t> opt_mul(std::optional<int64_t> a, int64_t b) {
  int64_t r;
  if (!a || __builtin_mul_overflow(*a, b, &r)) return std::nullopt;
  return r;
}

}  // namespace

SizeExpr::SizeExpr(int64_t constant) {
  if (constant != 0) add_term({}, constant);
}

SizeExpr SizeExpr::symbol(SymbolId id) {
  Atom a;
  a.kind = Atom::Kind::Symbol;
  a.symbol = id;
  a.text = "s" + std::to_string(id);
  return of_atom(std::move(a));
}

SizeExpr SizeExpr::of_atom(Atom a) {
  SizeExpr e;
  Monomial m;
  const std::string key = a.text;
  m.emplace(key, std::make_pair(std::move(a), 1));
  e.add_term(m, 1);
  return e;
}

std::string SizeExpr::mono_text(const Monomial& m) {
  std::string s;
  for (const auto& [text, ae] : m) {
    if (!s.empty()) s += "*";
    s += text;
    if (ae.second > 1) s += "**" + std::to_string(ae.second);
  }
  return s;
}

void SizeExpr::add_term(const Monomial& m, int64_t c) {
  if (c == 0) return;
  const std::string key = mono_text(m);
  Terms::Map& terms = terms_.mut();
  auto it = terms.find(key);
  if (it == terms.end()) {
    terms.emplace(key, Term{m, c});
    return;
  }
  it->second.coef = checked_add(it->second.coef, c);
  if (it->second.coef == 0) terms.erase(it);
}

std::optional<SizeExpr::Linear> SizeExpr::linear() const {
  Linear l;
  for (const auto& [key, t] : terms_) {
    if (t.mono.empty()) {
      l.constant = t.coef;
      continue;
    }
    if (t.mono.size() != 1) return std::nullopt;
    const auto& [atom, exponent] = t.mono.begin()->second;
    if (atom.kind != Atom::Kind::Symbol || exponent != 1) return std::nullopt;
    l.terms.emplace_back(atom.symbol, t.coef);
  }
  std::sort(l.terms.begin(), l.terms.end());
  return l;
}

bool SizeExpr::operator==(const SizeExpr& o) const {
  if (terms_.size() != o.terms_.size()) return false;
  for (auto a = terms_.begin(), b = o.terms_.begin(); a != terms_.end(); ++a, ++b)
    if (a->first != b->first || a->second.coef != b->second.coef) return false;
  return true;
}

SizeExpr operator+(const SizeExpr& a, const SizeExpr& b) {
  SizeExpr r = a;
  for (const auto& [key, t] : b.terms_) r.add_term(t.mono, t.coef);
  return r;
}

SizeExpr SizeExpr::operator-() const {
  SizeExpr r;
  for (const auto& [key, t] : terms_) r.add_term(t.mono, checked_mul(t.coef, -1));
  return r;
}

SizeExpr operator-(const SizeExpr& a, const SizeExpr& b) { return a + (-b); }

SizeExpr operator*(const SizeExpr& a, const SizeExpr& b) {
  SizeExpr r;
  for (const auto& [ka, ta] : a.terms_)
    for (const auto& [kb, tb] : b.terms_) {
      SizeExpr::Monomial m = ta.mono;
      for (const auto& [text, ae] : tb.mono) {
        auto it = m.find(text);
        if (it == m.end()) m.emplace(text, ae);
        else it->second.second += ae.second;
      }
      r.add_term(m, checked_mul(ta.coef, tb.coef));
    }
  return r;
}

int64_t SizeExpr::content() const {
  int64_t g = 0;
  for (const auto& [key, t] : terms_) g = std::gcd(g, t.coef < 0 ? -t.coef : t.coef);
  return g;
}

std::optional<int64_t> SizeExpr::constant() const {
  if (terms_.empty()) return 0;
  if (!is_constant()) return std::nullopt;
  return terms_.begin()->second.coef;
}

// a // k or a % k for a constant k != 0, simplified: k*q + r splits into q + r // k (r % k), and a
// common factor of r and k cancels (2*s0 // 4 -> s0 // 2; (2*s0) % 4 -> 2*(s0 % 2)).
SizeExpr divide_by_constant(const SizeExpr& a, int64_t k, bool remainder) {
  if (k < 0) {
    // a // k == (-a) // (-k); a % k == -((-a) % (-k)).
    return remainder ? -divide_by_constant(-a, -k, true) : divide_by_constant(-a, -k, false);
  }
  if (auto c = a.constant()) return remainder ? py_mod(*c, k) : py_floordiv(*c, k);
  if (k == 1) return remainder ? SizeExpr(0) : a;
  SizeExpr quotient, rest;
  for (const auto& [key, t] : a.terms_) {
    const int64_t q = py_floordiv(t.coef, k), r = t.coef - q * k;  // coef = q*k + r, 0 <= r < k
    if (q != 0) quotient.add_term(t.mono, q);
    if (r != 0) rest.add_term(t.mono, r);
  }
  if (auto c = rest.constant()) return remainder ? SizeExpr(*c % k) : quotient + SizeExpr(*c / k);  // 0 <= c < k
  const int64_t g = std::gcd(rest.content(), k);
  SizeExpr reduced;
  for (const auto& [key, t] : rest.terms_) reduced.add_term(t.mono, t.coef / g);
  const int64_t kk = k / g;
  if (kk == 1) return remainder ? SizeExpr(0) : quotient + reduced;
  Atom atom;
  atom.kind = remainder ? Atom::Kind::Mod : Atom::Kind::FloorDiv;
  atom.lhs = std::make_shared<const SizeExpr>(reduced);
  atom.rhs = std::make_shared<const SizeExpr>(kk);
  atom.text = "(" + operand(reduced) + (remainder ? " % " : " // ") + std::to_string(kk) + ")";
  SizeExpr part = SizeExpr::of_atom(std::move(atom));
  return remainder ? part * SizeExpr(g) : quotient + part;
}

// a / b when b divides a exactly as polynomials (b a single term): each term of a holds b's
// atoms at least as often, and a multiple of its coefficient.
std::optional<SizeExpr> exact_quotient(const SizeExpr& a, const SizeExpr& b) {
  if (b.terms_.size() != 1) return std::nullopt;
  const SizeExpr::Term& d = b.terms_.begin()->second;
  SizeExpr q;
  for (const auto& [key, t] : a.terms_) {
    if (t.coef % d.coef != 0) return std::nullopt;
    SizeExpr::Monomial m = t.mono;
    for (const auto& [text, ae] : d.mono) {
      auto it = m.find(text);
      if (it == m.end() || it->second.second < ae.second) return std::nullopt;
      if ((it->second.second -= ae.second) == 0) m.erase(it);
    }
    q.add_term(m, t.coef / d.coef);
  }
  return q;
}

SizeExpr SizeExpr::divide(const SizeExpr& a, const SizeExpr& b, bool remainder) {
  if (auto k = b.constant(); k && *k != 0) return divide_by_constant(a, *k, remainder);
  if (a == SizeExpr(0)) return 0;
  if (!b.is_constant())
    if (auto q = exact_quotient(a, b)) return remainder ? SizeExpr(0) : *q;
  Atom atom;  // a division by a symbol (or by 0: evaluate() says nullopt)
  atom.kind = remainder ? Atom::Kind::Mod : Atom::Kind::FloorDiv;
  atom.lhs = std::make_shared<const SizeExpr>(a);
  atom.rhs = std::make_shared<const SizeExpr>(b);
  atom.text = "(" + operand(a) + (remainder ? " % " : " // ") + operand(b) + ")";
  return of_atom(std::move(atom));
}

SizeExpr floordiv(const SizeExpr& a, const SizeExpr& b) { return SizeExpr::divide(a, b, false); }
SizeExpr mod(const SizeExpr& a, const SizeExpr& b) { return SizeExpr::divide(a, b, true); }

std::optional<int64_t> SizeExpr::evaluate(const std::vector<int64_t>& sizes) const {
  int64_t total = 0;
  for (const auto& [key, t] : terms_) {
    std::optional<int64_t> v = t.coef;
    for (const auto& [text, ae] : t.mono) {
      const Atom& atom = ae.first;
      std::optional<int64_t> x;
      if (atom.kind == Atom::Kind::Symbol) {
        if (atom.symbol < 0 || static_cast<size_t>(atom.symbol) >= sizes.size()) return std::nullopt;
        x = sizes[static_cast<size_t>(atom.symbol)];
      } else {
        std::optional<int64_t> l = atom.lhs->evaluate(sizes), r = atom.rhs->evaluate(sizes);
        if (!l || !r || *r == 0) return std::nullopt;
        x = atom.kind == Atom::Kind::FloorDiv ? py_floordiv(*l, *r) : py_mod(*l, *r);
      }
      for (int e = 0; e < ae.second; ++e) v = opt_mul(v, *x);
      if (!v) return std::nullopt;
    }
    if (__builtin_add_overflow(total, *v, &total)) return std::nullopt;
  }
  return total;
}

SizeExpr SizeExpr::substitute(const std::function<SizeExpr(SymbolId)>& by) const {
  SizeExpr out;
  for (const auto& [key, t] : terms_) {
    SizeExpr term(t.coef);
    for (const auto& [text, ae] : t.mono) {
      const Atom& atom = ae.first;
      const SizeExpr x = atom.kind == Atom::Kind::Symbol
          ? by(atom.symbol)
          : divide(atom.lhs->substitute(by), atom.rhs->substitute(by), atom.kind == Atom::Kind::Mod);
      for (int e = 0; e < ae.second; ++e) term = term * x;
    }
    out = out + term;
  }
  return out;
}

std::vector<SymbolId> SizeExpr::symbols() const {
  std::set<SymbolId> out;
  for (const auto& [key, t] : terms_)
    for (const auto& [text, ae] : t.mono) {
      if (ae.first.kind == Atom::Kind::Symbol) {
        out.insert(ae.first.symbol);
      } else {
        for (SymbolId s : ae.first.lhs->symbols()) out.insert(s);
        for (SymbolId s : ae.first.rhs->symbols()) out.insert(s);
      }
    }
  return {out.begin(), out.end()};
}

std::string SizeExpr::str() const {
  if (terms_.empty()) return "0";
  std::string s;
  auto emit = [&](const std::string& key, int64_t coef) {
    const bool negative = coef < 0;
    const int64_t mag = negative ? -coef : coef;
    if (s.empty()) s += negative ? "-" : "";
    else s += negative ? " - " : " + ";
    if (key.empty()) s += std::to_string(mag);
    else s += (mag == 1 ? "" : std::to_string(mag) + "*") + key;
  };
  for (const auto& [key, t] : terms_)  // the constant ("" sorts first) goes last
    if (!key.empty()) emit(key, t.coef);
  if (auto it = terms_.find(""); it != terms_.end()) emit("", it->second.coef);
  return s;
}

bool SizeExpr::nonnegative() const {
  for (const auto& [key, t] : terms_) {
    if (t.coef < 0) return false;
    for (const auto& [text, ae] : t.mono)
      if (ae.first.kind != Atom::Kind::Symbol) return false;
  }
  return true;
}

// ---- relations

Relation Relation::eq(SizeExpr a, SizeExpr b) { return Relation{Kind::Eq, std::move(a), std::move(b), 1}; }
Relation Relation::ne(SizeExpr a, SizeExpr b) { return Relation{Kind::Ne, std::move(a), std::move(b), 1}; }
Relation Relation::ge(SizeExpr a, SizeExpr b) { return Relation{Kind::Ge, std::move(a), std::move(b), 1}; }
Relation Relation::divisible(SizeExpr a, int64_t k) { return Relation{Kind::Divisible, std::move(a), SizeExpr(0), k}; }

std::optional<bool> Relation::holds(const std::vector<int64_t>& sizes) const {
  if (kind == Kind::Divisible) {
    std::optional<int64_t> v = lhs.evaluate(sizes);
    if (!v || divisor == 0) return std::nullopt;
    return py_mod(*v, divisor) == 0;
  }
  std::optional<int64_t> d = (lhs - rhs).evaluate(sizes);
  if (!d) return std::nullopt;
  switch (kind) {
    case Kind::Eq: return *d == 0;
    case Kind::Ne: return *d != 0;
    case Kind::Ge: return *d >= 0;
    case Kind::Divisible: break;
  }
  return std::nullopt;
}

std::optional<bool> Relation::decided() const {
  if (kind == Kind::Divisible) {
    if (divisor == 0) return std::nullopt;
    if (auto c = mod(lhs, divisor).constant()) return *c == 0;
    return std::nullopt;
  }
  const SizeExpr d = lhs - rhs;
  if (auto c = d.constant()) {
    switch (kind) {
      case Kind::Eq: return *c == 0;
      case Kind::Ne: return *c != 0;
      case Kind::Ge: return *c >= 0;
      case Kind::Divisible: break;
    }
  }
  if (kind == Kind::Ge && d.nonnegative()) return true;  // sizes are >= 0
  return std::nullopt;
}

std::string Relation::str() const {
  switch (kind) {
    case Kind::Eq: return lhs.str() + " == " + rhs.str();
    case Kind::Ne: return lhs.str() + " != " + rhs.str();
    case Kind::Ge: return lhs.str() + " >= " + rhs.str();
    case Kind::Divisible: return lhs.str() + " % " + std::to_string(divisor) + " == 0";
  }
  return "?";
}

std::optional<std::vector<Relation>> simplify(const std::vector<Relation>& relations) {
  std::vector<Relation> out;
  std::set<std::string> seen;
  for (const Relation& r : relations) {
    std::optional<bool> d = r.decided();
    if (d && !*d) return std::nullopt;
    if (d) continue;
    if (seen.insert(r.str()).second) out.push_back(r);
  }
  return out;
}

std::vector<SizeExpr::TermView> SizeExpr::terms() const {
  std::vector<TermView> out;
  for (const auto& [text, t] : terms_) {
    TermView v;
    v.coef = t.coef;
    for (const auto& [atom_text, ae] : t.mono) v.atoms.emplace_back(&ae.first, ae.second);
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace fastdyn::codegen::shapes
