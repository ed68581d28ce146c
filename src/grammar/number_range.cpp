#include "grammar/number_range.h"

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

namespace kvasir::grammar {
namespace {

using json = nlohmann::ordered_json;
using i128 = __int128;

constexpr int kMaxIntDigits = 16;  // as the plain `number` and `integer` rules

i128 pow10(int n) {
  i128 p = 1;
  for (int i = 0; i < n; ++i) p *= 10;
  return p;
}

std::string digits_of(i128 v) {  // v >= 0
  if (v == 0) return "0";
  std::string s;
  for (; v > 0; v /= 10) s += char('0' + int(v % 10));
  return {s.rbegin(), s.rend()};
}

i128 floor_div(i128 v, i128 p) { return v >= 0 ? v / p : -((-v + p - 1) / p); }
i128 ceil_div(i128 v, i128 p) { return -floor_div(-v, p); }

// A number as the schema wrote it: ±digits × 10^-scale (nlohmann keeps integers exact and prints
// doubles in their shortest round-trip form, so 0.1 is "0.1").
struct Decimal {
  bool negative = false;
  std::string digits = "0";  // no leading zeros
  int scale = 0;
};

Result<Decimal> decimal_of(const json& v, const std::string& key) {
  if (!v.is_number()) return Error{"'" + key + "' must be a number", ErrorCode::invalid_argument};
  std::string t = v.dump();
  Decimal d;
  if (!t.empty() && t[0] == '-') d.negative = true, t.erase(0, 1);
  int exponent = 0;
  if (const size_t e = t.find_first_of("eE"); e != std::string::npos) {
    exponent = std::stoi(t.substr(e + 1));
    t.resize(e);
  }
  std::string frac;
  if (const size_t dot = t.find('.'); dot != std::string::npos) frac = t.substr(dot + 1), t.resize(dot);
  std::string digits = t + frac;
  int scale = int(frac.size()) - exponent;
  while (scale > 0 && digits.size() > 1 && digits.back() == '0') digits.pop_back(), --scale;
  if (scale < 0) digits.append(size_t(std::min(-scale, 64)), '0'), scale = 0;
  digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
  if (digits == "0") scale = 0, d.negative = false;
  if (scale > kRangeMaxDecimals)
    return Error{"'" + key + "' " + v.dump() + " has more than " + std::to_string(kRangeMaxDecimals) + " decimals",
                 ErrorCode::invalid_argument};
  d.digits = digits;
  d.scale = scale;
  return d;
}

// d × 10^s as an integer (s >= d.scale); magnitudes past 17 integer digits are clamped there,
// beyond every number the grammar writes.
i128 scaled(const Decimal& d, int s) {
  i128 m = 0;
  if (int(d.digits.size()) - d.scale > kMaxIntDigits + 1) {
    m = pow10(kMaxIntDigits + 1 + s);
  } else {
    for (char c : d.digits) m = m * 10 + (c - '0');
    m *= pow10(s - d.scale);
  }
  return d.negative ? -m : m;
}

struct Bound {
  i128 value = 0;  // on the grid
  bool strict = false;
};

// Digit strings of the magnitudes N of an interval, N / 10^grid written with its decimal point,
// restricted to N ≡ 0 (mod modulus).
class DigitRanges {
 public:
  DigitRanges(int grid, int64_t modulus, std::string hint, const MakeRule& make_rule)
      : grid_(grid), k_(modulus), hint_(std::move(hint)), make_rule_(make_rule) {}

  i128 max() const { return pow10(kMaxIntDigits + grid_) - 1; }

  // Every N in [a, b] (0 <= a <= b <= max()), each followed by `tail`; nullopt: none.
  std::optional<std::string> magnitudes(i128 a, i128 b, const std::string& tail) {
    std::string out;
    for (int len = 1; len <= kMaxIntDigits; ++len) {
      const i128 lo = std::max(a, len == 1 ? i128(0) : pow10(len - 1 + grid_));
      const i128 hi = std::min(b, pow10(len + grid_) - 1);
      if (lo > hi) continue;
      auto e = range(pad(lo, len + grid_), pad(hi, len + grid_), 0);
      if (!e) continue;
      out += (out.empty() ? "" : " | ") + join(*e, tail);
    }
    if (out.empty()) return std::nullopt;
    return out;
  }

 private:
  static std::string pad(i128 v, int n) {
    std::string s = digits_of(v);
    return std::string(size_t(std::max(0, n - int(s.size()))), '0') + s;
  }
  static std::string join(const std::string& a, const std::string& b) {
    if (a.empty()) return b;
    if (b.empty()) return a;
    return a + " " + b;
  }
  static std::string digit_class(const std::vector<int>& ds) {
    if (ds.size() == 1) return "\"" + std::to_string(ds[0]) + "\"";
    std::string c = "[";
    for (size_t i = 0; i < ds.size();) {
      size_t j = i;
      while (j + 1 < ds.size() && ds[j + 1] == ds[j] + 1) ++j;
      c += char('0' + ds[i]);
      if (j > i) c += "-", c += char('0' + ds[j]);
      i = j + 1;
    }
    return c + "]";
  }
  // The decimal point, where n digits are left and they are the fraction's.
  std::string dot(int n) const { return grid_ > 0 && n == grid_ ? "\".\"" : ""; }
  int next(int r, int d) const { return int((int64_t(r) * 10 + d) % k_); }

  // Strings of exactly n digits s with (r·10^n + s) ≡ 0 (mod k); nullopt: none.
  std::optional<std::string> free(int n, int r) {
    if (k_ == 1) {
      if (n == 0) return "";
      const int before = grid_ > 0 && n > grid_ ? n - grid_ : (grid_ > 0 && n == grid_ ? 0 : n);
      const int after = n - before;
      std::string s = before > 0 ? "[0-9]{" + std::to_string(before) + "}" : "";
      if (grid_ > 0 && n >= grid_) s = join(s, "\".\" [0-9]{" + std::to_string(after) + "}");
      return s;
    }
    i128 p = 1;  // 10^n mod k, and whether 10^n is past k
    bool big = false;
    for (int i = 0; i < n; ++i) p *= 10, big = big || p >= k_, p %= k_;
    const int64_t need = int64_t((k_ - (int64_t(r) * int64_t(p)) % k_) % k_);  // the least s that works
    if (!big && need >= int64_t(pow10(n))) return std::nullopt;
    if (n == 0) return "";
    if (auto it = memo_.find({n, r}); it != memo_.end()) return it->second;
    std::map<int, std::vector<int>> by_next;
    for (int d = 0; d <= 9; ++d) by_next[next(r, d)].push_back(d);
    std::string body;
    for (const auto& [r2, ds] : by_next) {
      auto rest = free(n - 1, r2);
      if (!rest) continue;
      body += (body.empty() ? "" : " | ") + join(digit_class(ds), *rest);
    }
    if (body.empty()) return std::nullopt;
    const std::string d = dot(n);
    const std::string name = make_rule_(hint_ + "-mod", d.empty() ? body : d + " ( " + body + " )");
    memo_[{n, r}] = name;
    return name;
  }

  // Equal-length digit strings from x to y (x <= y), after a prefix of remainder r.
  std::optional<std::string> range(const std::string& x, const std::string& y, int r) {
    const int n = int(x.size());
    if (n == 0) return r == 0 ? std::optional<std::string>("") : std::nullopt;
    if (x.find_first_not_of('0') == std::string::npos && y.find_first_not_of('9') == std::string::npos) return free(n, r);
    const int a = x[0] - '0', b = y[0] - '0';
    const std::string d = dot(n);
    if (a == b) {
      auto sub = range(x.substr(1), y.substr(1), next(r, a));
      if (!sub) return std::nullopt;
      return join(d, join(digit_class({a}), *sub));
    }
    std::vector<std::string> alts;
    if (auto sub = range(x.substr(1), std::string(size_t(n - 1), '9'), next(r, a))) alts.push_back(join(digit_class({a}), *sub));
    std::map<int, std::vector<int>> by_next;
    for (int m = a + 1; m < b; ++m) by_next[next(r, m)].push_back(m);
    for (const auto& [r2, ds] : by_next)
      if (auto rest = free(n - 1, r2)) alts.push_back(join(digit_class(ds), *rest));
    if (auto sub = range(std::string(size_t(n - 1), '0'), y.substr(1), next(r, b))) alts.push_back(join(digit_class({b}), *sub));
    if (alts.empty()) return std::nullopt;
    std::string body;
    for (const std::string& alt : alts) body += (body.empty() ? "" : " | ") + alt;
    return join(d, alts.size() == 1 ? body : "( " + body + " )");
  }

  const int grid_;
  const int64_t k_;
  const std::string hint_;
  const MakeRule& make_rule_;
  std::map<std::pair<int, int>, std::string> memo_;
};

}  // namespace

bool has_numeric_bounds(const json& s) {
  for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
    if (s.contains(k)) return true;
  return false;
}

Result<std::string> numeric_range_gbnf(const json& s, bool integer, const std::string& hint, const MakeRule& make_rule) {
  auto fail = [](const std::string& m) { return Error{m, ErrorCode::invalid_argument}; };
  // The bounds as decimals, and the grid: the multipleOf's (integers: 1), else the finest bound's.
  std::optional<Decimal> lo, hi, step;
  bool lo_strict = false, hi_strict = false;
  for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
    if (!s.contains(key)) continue;
    if (s[key].is_boolean())
      return fail(std::string("'") + key + "' as a boolean (draft 4) is not supported: give the bound as a number");
    auto d = decimal_of(s[key], key);
    if (!d) return Error{d.error(), d.error_code()};
    const bool strict = key[0] == 'e';
    const bool is_min = std::string(key).find("inimum") != std::string::npos;
    std::optional<Decimal>& slot = is_min ? lo : hi;
    bool& slot_strict = is_min ? lo_strict : hi_strict;
    // Two lower (or upper) bounds: the tighter holds.
    if (slot) {
      const int sc = std::max(slot->scale, d->scale);
      const i128 old = scaled(*slot, sc), now = scaled(*d, sc);
      const bool tighter = is_min ? (now > old || (now == old && strict)) : (now < old || (now == old && strict));
      if (!tighter) continue;
    }
    slot = *d;
    slot_strict = strict;
  }
  int64_t modulus = 1;
  int grid = 0;
  if (s.contains("multipleOf")) {
    auto d = decimal_of(s["multipleOf"], "multipleOf");
    if (!d) return Error{d.error(), d.error_code()};
    if (d->negative || d->digits == "0") return fail("'multipleOf' must be greater than 0");
    const i128 q = scaled(*d, d->scale);
    if (integer) {  // n·10^s ≡ 0 (mod q)  <=>  n ≡ 0 (mod q / gcd(q, 10^s))
      i128 a = q, b = pow10(d->scale);
      while (b != 0) a %= b, std::swap(a, b);
      modulus = int64_t(q / a);
    } else {
      modulus = q > i128(kRangeMaxModulus) ? kRangeMaxModulus + 1 : int64_t(q);
      grid = d->scale;
    }
    if (modulus > kRangeMaxModulus)
      return fail("'multipleOf' " + s["multipleOf"].dump() + " spans more than " + std::to_string(kRangeMaxModulus) +
                  " steps of its last digit (the grammar tracks the remainder digit by digit)");
    step = *d;
  }
  const bool discrete = integer || step.has_value();  // no rest below a grid step
  if (!discrete) grid = std::max(lo ? lo->scale : 0, hi ? hi->scale : 0);
  // Bounds on the grid: a discrete grid rounds them inward and makes them inclusive.
  auto on_grid = [&](const Decimal& d, bool strict, bool is_min) -> Bound {
    const int sc = std::max(d.scale, grid);
    const i128 v = scaled(d, sc), p = pow10(sc - grid);
    if (!discrete) return {v, strict};
    if (is_min) return {strict ? floor_div(v, p) + 1 : ceil_div(v, p), false};
    return {strict ? ceil_div(v, p) - 1 : floor_div(v, p), false};
  };
  std::optional<Bound> min, max;
  if (lo) min = on_grid(*lo, lo_strict, true);
  if (hi) max = on_grid(*hi, hi_strict, false);

  DigitRanges digits(grid, modulus, hint, make_rule);
  const i128 top = digits.max();
  const int more = kMaxIntDigits - grid;  // decimals past the grid's
  const std::string g = std::to_string(more);
  // What may follow N's digits: any rest, a zero rest, a rest above zero.
  const std::string any = discrete ? (grid > 0 ? "\"0\"{0," + g + "}" : "")
                                   : (grid > 0 ? "[0-9]{0," + g + "}" : "( \".\" [0-9]{1,16} )?");
  const std::string zero = grid > 0 ? "\"0\"{0," + g + "}" : (discrete ? "" : "( \".\" \"0\"{1,16} )?");
  const std::string m1 = std::to_string(more - 1);
  const std::string positive = grid > 0 ? "\"0\"{0," + m1 + "} [1-9] [0-9]{0," + m1 + "}"
                                        : "\".\" \"0\"{0,15} [1-9] [0-9]{0,15}";

  // Magnitudes m = N + rest of one sign: m >= a (> a when a_strict), m <= b (< b), b = none: unbounded.
  auto side = [&](i128 a, bool a_strict, std::optional<Bound> b) -> std::string {
    std::string out;
    auto add = [&](std::optional<std::string> e) {
      if (e) out += (out.empty() ? "" : " | ") + *e;
    };
    const i128 b_value = b ? std::min(b->value, top + 1) : top;
    const bool b_strict = b ? b->strict : false;
    a = std::max<i128>(a, 0);
    if (a > top) return out;
    if (discrete) {
      const i128 first = a + (a_strict ? 1 : 0), last = std::min(b_value - (b_strict ? 1 : 0), top);
      if (first <= last) add(digits.magnitudes(first, last, any));
      return out;
    }
    if (a_strict && (!b || a < b_value)) add(digits.magnitudes(a, a, positive));
    const i128 first = a + (a_strict ? 1 : 0);
    if (!b || b_value > top) {
      if (first <= top) add(digits.magnitudes(first, top, any));
      return out;
    }
    if (first <= b_value - 1) add(digits.magnitudes(first, b_value - 1, any));
    if (!b_strict && first <= b_value) add(digits.magnitudes(b_value, b_value, zero));
    return out;
  };
  std::string body;
  // Values >= 0.
  if (!(max && (max->value < 0 || (max->value == 0 && max->strict)))) {
    const bool from_min = min && min->value >= 0;
    body = side(from_min ? min->value : 0, from_min && min->strict, max);
  }
  // Values < 0, as "-" and their magnitude: above -max (or 0), below -min.
  if (!(min && min->value >= 0)) {
    const bool from_max = max && max->value < 0;
    std::optional<Bound> m;
    if (min) m = Bound{-min->value, min->strict};
    const std::string neg = side(from_max ? -max->value : 0, from_max ? max->strict : true, m);
    if (!neg.empty()) body = "\"-\" ( " + neg + " )" + (body.empty() ? "" : " | " + body);
  }
  if (body.empty()) return fail(std::string("no ") + (integer ? "integer" : "number") + " satisfies the schema's bounds");
  return body;
}

}  // namespace kvasir::grammar
