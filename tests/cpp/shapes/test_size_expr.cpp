// tests/cpp/shapes/test_size_expr.cpp — codegen/shapes/size_expr.h: the canonical form, the
// simplification of // and %, evaluation with Python's semantics, and relations (what guards
// will check: hold, fail, 0/1, decided at compile time).
#include "codegen/shapes/size_expr.h"

#include <gtest/gtest.h>

#include <random>

namespace fastdyn::codegen::shapes {
namespace {

const SizeExpr s0 = SizeExpr::symbol(0), s1 = SizeExpr::symbol(1), s2 = SizeExpr::symbol(2);

int64_t py_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

TEST(SizeExpr, OneCanonicalFormSoEqualityIsStructural) {
  EXPECT_EQ(s0 * s1 + s1 * s0, 2 * s0 * s1);
  EXPECT_EQ((s0 * s1 + s1 * s0).str(), "2*s0*s1");
  EXPECT_EQ(s0 - s0, SizeExpr(0));
  EXPECT_EQ((s0 + 1) * (s0 - 1), s0 * s0 - 1);
  EXPECT_EQ((s0 * s0 - 1).str(), "s0**2 - 1");
  EXPECT_EQ((3 - s1 + s0).str(), "s0 - s1 + 3");
  EXPECT_TRUE(SizeExpr(7).is_constant());
  EXPECT_EQ(*SizeExpr(7).constant(), 7);
  EXPECT_FALSE((s0 - s0 + s1).is_constant());
  EXPECT_EQ((s2 * s0 + s1).symbols(), (std::vector<SymbolId>{0, 1, 2}));
  // Contiguous strides of [s0, s1, 4] (what TensorMeta will hold).
  const SizeExpr inner = 4, mid = s2 * 0 + 4, outer = s1 * 4;
  EXPECT_EQ(inner, mid);
  EXPECT_EQ(outer.str(), "4*s1");
}

TEST(SizeExpr, DivisionByAConstantSimplifiesAndStaysExact) {
  EXPECT_EQ(floordiv(4 * s0 + 8, 4), s0 + 2);
  EXPECT_EQ(mod(4 * s0, 2), SizeExpr(0));
  EXPECT_EQ(floordiv(2 * s0, 4).str(), "(s0 // 2)");
  EXPECT_EQ(mod(2 * s0, 4).str(), "2*(s0 % 2)");
  EXPECT_EQ(floordiv(6 * s0 + 7, 3).str(), "2*s0 + 2");  // 6*s0 + 7 = 3*(2*s0 + 2) + 1
  EXPECT_EQ(mod(6 * s0 + 7, 3), SizeExpr(1));
  EXPECT_EQ(floordiv(SizeExpr(-7), 2), SizeExpr(-4));  // Python's floor
  EXPECT_EQ(mod(SizeExpr(-7), 2), SizeExpr(1));
  EXPECT_EQ(mod(SizeExpr(7), -2), SizeExpr(-1));
  // Every simplification against brute force, with negative coefficients and divisors.
  std::mt19937 rng(0);
  std::uniform_int_distribution<int> coef(-9, 9), size(0, 20), divisor(-6, 6);
  for (int trial = 0; trial < 2000; ++trial) {
    SizeExpr e = coef(rng);
    for (const SizeExpr* s : {&s0, &s1}) e = e + coef(rng) * *s + coef(rng) * *s * s1;
    int k = 0;
    while (k == 0) k = divisor(rng);
    const SizeExpr q = floordiv(e, k), r = mod(e, k);
    for (int probe = 0; probe < 5; ++probe) {
      const std::vector<int64_t> sizes = {size(rng), size(rng)};
      const int64_t v = *e.evaluate(sizes);
      ASSERT_EQ(*q.evaluate(sizes), py_floordiv(v, k)) << e.str() << " // " << k << " -> " << q.str();
      ASSERT_EQ(*r.evaluate(sizes), v - py_floordiv(v, k) * k) << e.str() << " % " << k << " -> " << r.str();
    }
  }
}

TEST(SizeExpr, DivisionByASymbol) {
  EXPECT_EQ(floordiv(s0 * s1, s1), s0);  // exact: assumes s1 != 0 (0 and 1 are specialised)
  EXPECT_EQ(mod(3 * s0 * s1, s1), SizeExpr(0));
  const SizeExpr q = floordiv(s0 + 1, s1);
  EXPECT_EQ(q.str(), "((s0 + 1) // s1)");
  EXPECT_EQ(*q.evaluate({9, 4}), 2);
  EXPECT_FALSE(q.evaluate({9, 0}).has_value()) << "division by a size that is 0";
  EXPECT_EQ(*mod(s0 + 1, s1).evaluate({9, 4}), 2);
  EXPECT_EQ(q.symbols(), (std::vector<SymbolId>{0, 1}));
}

TEST(SizeExpr, EvaluationReportsWhatItCannotCompute) {
  EXPECT_EQ(*(s0 * s1 + 3).evaluate({4, 5}), 23);
  EXPECT_FALSE(s2.evaluate({1, 2}).has_value()) << "an unbound symbol";
  EXPECT_FALSE((s0 * s0 * s0).evaluate({int64_t(1) << 30}).has_value()) << "an overflow";
}

TEST(Relation, HoldFailAndZeroOne) {
  const Relation same = Relation::eq(s0, s1);
  EXPECT_TRUE(*same.holds({3, 3}));
  EXPECT_FALSE(*same.holds({3, 4}));
  EXPECT_FALSE(same.holds({3}).has_value()) << "an unbound size fails the guard";
  const Relation one = Relation::eq(s0, 1);  // broadcasting relied on a size being 1
  EXPECT_TRUE(*one.holds({1}));
  EXPECT_FALSE(*one.holds({0}));
  const Relation nonzero = Relation::ne(s0, 0);
  EXPECT_FALSE(*nonzero.holds({0}));
  EXPECT_TRUE(*nonzero.holds({5}));
  const Relation at_least = Relation::ge(s0, 2);
  EXPECT_TRUE(*at_least.holds({2}));
  EXPECT_FALSE(*at_least.holds({1}));
  const Relation div8 = Relation::divisible(s0 * s1, 8);  // a view needed it
  EXPECT_TRUE(*div8.holds({4, 6}));
  EXPECT_FALSE(*div8.holds({3, 6}));
}

TEST(Relation, DecidedOnceAtCompileTime) {
  EXPECT_EQ(Relation::eq(2 * s0, s0 + s0).decided(), std::optional<bool>(true));
  EXPECT_EQ(Relation::eq(s0 + 1, s0).decided(), std::optional<bool>(false));
  EXPECT_EQ(Relation::ge(s0 * s1 + 1, 1).decided(), std::optional<bool>(true)) << "sizes are >= 0";
  EXPECT_FALSE(Relation::ge(s0 - s1, 0).decided().has_value());
  EXPECT_EQ(Relation::divisible(8 * s0 + 4, 4).decided(), std::optional<bool>(true));
  EXPECT_FALSE(Relation::divisible(s0, 8).decided().has_value());
  auto kept = simplify({Relation::eq(s0, s1), Relation::eq(2 * s0, s0 + s0), Relation::eq(s0, s1),
                        Relation::ge(s0, 0), Relation::divisible(s1, 4)});
  ASSERT_TRUE(kept.has_value());
  ASSERT_EQ(kept->size(), 2u);
  EXPECT_EQ((*kept)[0].str(), "s0 == s1");
  EXPECT_EQ((*kept)[1].str(), "s1 % 4 == 0");
  EXPECT_FALSE(simplify({Relation::eq(s0, s1), Relation::ne(s0 + 1, s0 + 1)}).has_value()) << "a contradiction";
}

// The linear view guards use: constant + sum coef * symbol, or nothing for // % and products.
TEST(SizeExpr, LinearFormIsWhatGuardRelationsHold) {
  const SizeExpr s0 = SizeExpr::symbol(0), s1 = SizeExpr::symbol(1);
  const auto l = (SizeExpr(3) * s1 - s0 + SizeExpr(-21)).linear();
  ASSERT_TRUE(l);
  EXPECT_EQ(l->constant, -21);
  ASSERT_EQ(l->terms.size(), 2u);
  EXPECT_EQ(l->terms[0], (std::pair<SymbolId, int64_t>{0, -1}));
  EXPECT_EQ(l->terms[1], (std::pair<SymbolId, int64_t>{1, 3}));
  EXPECT_TRUE(SizeExpr(7).linear());
  EXPECT_FALSE((s0 * s1).linear());
  EXPECT_FALSE((s0 * s0).linear());
  EXPECT_FALSE(floordiv(s0, SizeExpr(4)).linear());
}

}  // namespace
}  // namespace fastdyn::codegen::shapes
