// JSON Schema's numeric keywords against brute force: for every integer of a window, and for
// decimals on and off each schema's grid, the grammar admits a spelling exactly when the value
// satisfies minimum / maximum / exclusiveMinimum / exclusiveMaximum / multipleOf (computed here
// in exact integer arithmetic, not by the code under test). Off-grid spellings (more decimals
// than a discrete grid, "-0", leading zeros, exponents) are only checked never to be admitted
// when invalid: the grammar may write a subset of the valid spellings, never a superset.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"

using namespace kvasir::grammar;
using json = nlohmann::ordered_json;

namespace {

struct Checker {
  std::shared_ptr<const CompiledGrammar> g;
  explicit Checker(const json& schema) {
    auto gr = compile_json_schema(schema);
    EXPECT_TRUE(gr.ok()) << schema.dump() << ": " << gr.error();
    if (gr.ok()) g = compile(std::move(*gr), std::make_shared<TokenIndex>(std::vector<std::string>{"x"}));
  }
  bool admits(const std::string& text) const {
    if (!g) return false;
    Matcher m(g);
    return m.accept_bytes(text) && m.can_end();
  }
};

// value = units / 10^scale; the bounds in the same units.
struct Rule {
  std::optional<int64_t> min, max, xmin, xmax;  // scaled
  int64_t multiple = 0;                          // scaled; 0: none
  bool ok(int64_t v) const {
    return (!min || v >= *min) && (!max || v <= *max) && (!xmin || v > *xmin) && (!xmax || v < *xmax) &&
           (multiple == 0 || v % multiple == 0);
  }
};

std::string spell(int64_t units, int scale) {  // units / 10^scale with exactly `scale` decimals
  const bool neg = units < 0;
  const uint64_t m = uint64_t(neg ? -units : units);
  std::string s = std::to_string(m);
  if (scale > 0) {
    if (int(s.size()) <= scale) s = std::string(size_t(scale + 1 - int(s.size())), '0') + s;
    s.insert(s.size() - size_t(scale), ".");
  }
  return (neg ? "-" : "") + s;
}

}  // namespace

TEST(NumberRange, IntegersAdmittedExactlyWhenInBounds) {
  const std::pair<const char*, Rule> cases[] = {
      {R"({"type":"integer","minimum":0,"maximum":150})", {.min = 0, .max = 150}},
      {R"({"type":"integer","exclusiveMinimum":-7,"maximum":12})", {.max = 12, .xmin = -7}},
      {R"({"type":"integer","minimum":-150,"exclusiveMaximum":-3})", {.min = -150, .xmax = -3}},
      {R"({"type":"integer","minimum":99,"maximum":1001})", {.min = 99, .max = 1001}},
      {R"({"type":"integer","minimum":2.5,"maximum":7.5})", {.min = 3, .max = 7}},
      {R"({"type":"integer","exclusiveMinimum":2.5,"exclusiveMaximum":7.0})", {.min = 3, .max = 6}},
      {R"({"type":"integer","maximum":-1})", {.max = -1}},
      {R"({"type":"integer","minimum":-1})", {.min = -1}},
      {R"({"type":"integer","minimum":0,"minimum":5})", {.min = 5}},
      {R"({"type":"integer","multipleOf":7,"minimum":-50,"maximum":200})", {.min = -50, .max = 200, .multiple = 7}},
      {R"({"type":"integer","multipleOf":5})", {.multiple = 5}},
      {R"({"type":"integer","multipleOf":3,"exclusiveMinimum":10})", {.xmin = 10, .multiple = 3}},
      {R"({"type":"integer","multipleOf":0.4})", {.multiple = 2}},  // an integer n·0.4-divisible: n even
      {R"({"type":"integer","multipleOf":0.5,"maximum":9})", {.max = 9}},
      {R"({"type":"integer","multipleOf":64,"minimum":-1000,"maximum":1000})", {.min = -1000, .max = 1000, .multiple = 64}},
      {R"({"minimum":3,"maximum":3,"type":"integer"})", {.min = 3, .max = 3}},
  };
  for (const auto& [text, rule] : cases) {
    const Checker c(json::parse(text));
    int admitted = 0;
    for (int64_t v = -1200; v <= 1200; ++v) {
      const bool want = rule.ok(v);
      admitted += want;
      ASSERT_EQ(c.admits(std::to_string(v)), want) << text << " on " << v;
    }
    EXPECT_GT(admitted, 0) << text;
    for (const char* never : {"-0", "007", "+5", "1e2", "5.", ".5", "--1", ""}) EXPECT_FALSE(c.admits(never)) << text << " " << never;
  }
  // Far from the window: 16 digits at most, as the plain integer rule.
  const Checker big(json::parse(R"({"type":"integer","minimum":1})"));
  EXPECT_TRUE(big.admits("1234567890123456"));
  EXPECT_FALSE(big.admits("12345678901234567"));
  EXPECT_FALSE(big.admits("-1234567890123456"));
  const Checker neg(json::parse(R"({"type":"integer","maximum":-1})"));
  EXPECT_TRUE(neg.admits("-9999999999999999"));
  EXPECT_FALSE(neg.admits("9999999999999999"));
}

TEST(NumberRange, NumbersAdmittedExactlyWhenInBounds) {
  struct Case {
    const char* schema;
    Rule rule;    // at 10^-3
    int grid;     // decimals a discrete or bounded grammar writes (every finer spelling is checked for soundness only)
    bool discrete;
  };
  const Case cases[] = {
      {R"({"type":"number","minimum":0,"maximum":1})", {.min = 0, .max = 1000}, 0, false},
      {R"({"type":"number","minimum":0.5,"exclusiveMaximum":2.75})", {.min = 500, .xmax = 2750}, 2, false},
      {R"({"type":"number","exclusiveMinimum":0})", {.xmin = 0}, 0, false},
      {R"({"type":"number","maximum":-1.5})", {.max = -1500}, 1, false},
      {R"({"type":"number","exclusiveMinimum":-2.5,"maximum":0.25})", {.max = 250, .xmin = -2500}, 2, false},
      {R"({"type":"number","multipleOf":0.01,"minimum":0,"maximum":100})", {.min = 0, .max = 100000, .multiple = 10}, 2, true},
      {R"({"type":"number","multipleOf":0.25,"exclusiveMaximum":1})", {.xmax = 1000, .multiple = 250}, 2, true},
      {R"({"type":"number","multipleOf":0.5,"exclusiveMinimum":-1.2,"exclusiveMaximum":0.7})",
       {.xmin = -1200, .xmax = 700, .multiple = 500}, 1, true},
      {R"({"minimum":-0.001,"maximum":0.001})", {.min = -1, .max = 1}, 3, false},
  };
  for (const Case& k : cases) {
    const Checker c(json::parse(k.schema));
    int admitted = 0;
    for (int64_t v = -3000; v <= 3000; ++v) {
      const bool want = k.rule.ok(v);
      // On the grid, with the grid's decimals: admitted exactly when valid.
      const int64_t step = int64_t(std::pow(10, 3 - k.grid));
      if (v % step == 0) {
        ASSERT_EQ(c.admits(spell(v / step, k.grid)), want) << k.schema << " on " << spell(v / step, k.grid);
        admitted += want;
      }
      // Three decimals: never admitted when invalid; for a bounded (not discrete) grammar, admitted when valid.
      const bool got = c.admits(spell(v, 3));
      if (!want) ASSERT_FALSE(got) << k.schema << " on " << spell(v, 3);
      if (want && !k.discrete && k.grid <= 3) ASSERT_TRUE(got) << k.schema << " on " << spell(v, 3);
    }
    EXPECT_GT(admitted, 0) << k.schema;
    for (const char* never : {"-0", "00.5", "1e0", ".5", "-.5", "", "-"}) EXPECT_FALSE(c.admits(never)) << k.schema << " " << never;
  }
  // Continuous bounds with integer values leave the natural spellings alone.
  const Checker age(json::parse(R"({"type":"number","minimum":0,"maximum":150})"));
  for (const char* yes : {"0", "42", "42.5", "149.999", "150", "150.0", "0.000001"}) EXPECT_TRUE(age.admits(yes)) << yes;
  for (const char* no : {"150.01", "-0.5", "151", "-1"}) EXPECT_FALSE(age.admits(no)) << no;
}
