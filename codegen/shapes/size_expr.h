// codegen/shapes/size_expr.h — sizes as symbols: integer
// expressions over size symbols in one canonical form, relations between them, evaluated in C++.
//
// A SizeExpr is a polynomial with integer coefficients over atoms, kept as a sorted sum of terms
// (coefficient × product of atoms, each atom with an exponent). An atom is a size symbol (s0,
// s1, ...) or an integer division or remainder that does not simplify (FloorDiv(e, k),
// Mod(e, k) for a constant k > 0), itself canonical. Because the form is canonical, two
// expressions are equal exactly when their texts are, so `==`, hashing and cache keys are
// structural, and simplification happens once, when an expression is built:
//   s0*s1 + s1*s0 -> 2*s0*s1;  (4*s0 + 8) // 4 -> s0 + 2;  (4*s0) % 2 -> 0;  s0 - s0 -> 0.
// Contiguous strides of [s0, s1, 4] are [4*s1, 4, 1]; a flattened view's index is
// FloorDiv(i, s1) and Mod(i, s1) only where the divisor is a symbol (kept as atoms with symbolic
// divisor then: see floordiv/mod).
//
// A Relation is what a trace relied on (x.shape[0] == y.shape[1], a size >= 2, a size divisible
// by 8 for a view, a size that is 1 so that it broadcasts): guards check relations against the
// sizes of a call with no Python and no SymPy.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fastdyn::codegen::shapes {

using SymbolId = int32_t;  // s<id>

class SizeExpr;

// One atom of a term: a symbol, or a floor division / remainder by a divisor that does not
// simplify. Compared and ordered by its canonical text.
struct Atom {
  enum class Kind : uint8_t { Symbol, FloorDiv, Mod } kind = Kind::Symbol;
  SymbolId symbol = -1;                        // Symbol
  std::shared_ptr<const SizeExpr> lhs, rhs;    // FloorDiv / Mod: lhs // rhs, lhs % rhs
  std::string text;                            // canonical text, the ordering key
};

class SizeExpr {
 public:
  SizeExpr() = default;                 // 0
  SizeExpr(int64_t constant);           // NOLINT: a constant converts implicitly
  static SizeExpr symbol(SymbolId id);

  friend SizeExpr operator+(const SizeExpr& a, const SizeExpr& b);
  friend SizeExpr operator-(const SizeExpr& a, const SizeExpr& b);
  friend SizeExpr operator*(const SizeExpr& a, const SizeExpr& b);
  SizeExpr operator-() const;
  // Python's // and % (floor, the sign of the divisor). A divisor that is 0 where evaluated
  // makes evaluate() return nullopt.
  friend SizeExpr floordiv(const SizeExpr& a, const SizeExpr& b);
  friend SizeExpr mod(const SizeExpr& a, const SizeExpr& b);

  bool is_constant() const { return terms_.empty() || (terms_.size() == 1 && terms_.begin()->first.empty()); }
  std::optional<int64_t> constant() const;  // the value when is_constant()
  // The value with every symbol bound (sizes[id] for s<id>); nullopt for a symbol out of range,
  // a division by zero, or an overflow.
  std::optional<int64_t> evaluate(const std::vector<int64_t>& sizes) const;
  std::vector<SymbolId> symbols() const;  // sorted, distinct
  // Every symbol replaced by `by(id)` (a constant, another symbol, any expression), simplified:
  // a size pinned to its value, or two sizes unified, through all expressions that mention it.
  SizeExpr substitute(const std::function<SizeExpr(SymbolId)>& by) const;
  std::string str() const;                // canonical: equal expressions, equal texts
  // Whether every term has a positive coefficient over symbols only (or is a constant >= 0):
  // then the value is >= 0 for any sizes.
  bool nonnegative() const;
  // constant + sum coef * s<id>, when the expression is that (every term a constant or one
  // symbol to the first power, no // or %): what a guard's linear relation can hold.
  struct Linear {
    int64_t constant = 0;
    std::vector<std::pair<SymbolId, int64_t>> terms;  // (symbol, coefficient), by symbol
  };
  std::optional<Linear> linear() const;
  // The terms in canonical order, each a coefficient times a product of atoms with exponents
  // (none: the constant term): what a code generator walks to compute the value at run time.
  struct TermView {
    int64_t coef = 0;
    std::vector<std::pair<const Atom*, int>> atoms;
  };
  std::vector<TermView> terms() const;

  bool operator==(const SizeExpr& o) const;
  bool operator!=(const SizeExpr& o) const { return !(*this == o); }

 private:
  // A monomial: atom text -> (atom, exponent >= 1); empty = the constant term.
  using Monomial = std::map<std::string, std::pair<Atom, int>>;
  struct Term {
    Monomial mono;
    int64_t coef = 0;  // never 0 in terms_
  };
  // The terms, keyed by the monomial's text ("" for the constant); shared between copies and
  // copied on write (add_term, while an expression is built): every graph a pass makes copies
  // each meta's expressions, and that copy is then a reference count, not a map of strings.
  class Terms {
   public:
    using Map = std::map<std::string, Term>;
    Map::const_iterator begin() const { return map().begin(); }
    Map::const_iterator end() const { return map().end(); }
    Map::const_iterator find(const std::string& key) const { return map().find(key); }
    size_t size() const { return p_ ? p_->size() : 0; }
    bool empty() const { return !p_ || p_->empty(); }
    Map& mut() {
      if (!p_ || p_.use_count() > 1) p_ = std::make_shared<Map>(p_ ? *p_ : Map{});
      return *p_;
    }

   private:
    const Map& map() const {
      static const Map kEmpty;
      return p_ ? *p_ : kEmpty;
    }
    std::shared_ptr<Map> p_;
  };
  Terms terms_;

  static SizeExpr of_atom(Atom a);
  static SizeExpr divide(const SizeExpr& a, const SizeExpr& b, bool remainder);
  static std::string mono_text(const Monomial& m);
  void add_term(const Monomial& m, int64_t c);
  int64_t content() const;  // gcd of the coefficients (0 for the zero expression)
  friend SizeExpr divide_by_constant(const SizeExpr& a, int64_t k, bool remainder);
  friend std::optional<SizeExpr> exact_quotient(const SizeExpr& a, const SizeExpr& b);
};

// What a trace relied on, checked by guards on each call.
struct Relation {
  enum class Kind : uint8_t {
    Eq,         // lhs == rhs
    Ne,         // lhs != rhs
    Ge,         // lhs >= rhs
    Divisible,  // lhs % divisor == 0
  } kind = Kind::Eq;
  SizeExpr lhs, rhs;
  int64_t divisor = 1;

  static Relation eq(SizeExpr a, SizeExpr b);
  static Relation ne(SizeExpr a, SizeExpr b);
  static Relation ge(SizeExpr a, SizeExpr b);
  static Relation divisible(SizeExpr a, int64_t k);

  // Holds for these sizes; nullopt when it cannot be evaluated (then the guard fails).
  std::optional<bool> holds(const std::vector<int64_t>& sizes) const;
  // Decided without sizes (2*s0 == s0 + s0 is always true; s0 + 1 == s0 never): a relation
  // that is always true needs no guard; one that is never true is a contradiction.
  std::optional<bool> decided() const;
  std::string str() const;
};

// Relations simplified once, at compile time: trivially true ones dropped, duplicates merged.
// Returns nullopt when one is trivially false (the set can never hold).
std::optional<std::vector<Relation>> simplify(const std::vector<Relation>& relations);

}  // namespace fastdyn::codegen::shapes
