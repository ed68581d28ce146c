// JSON Schema's numeric keywords (minimum, maximum, exclusiveMinimum, exclusiveMaximum,
// multipleOf) as exact grammars: every number the grammar admits satisfies them.
//
// A bound with d decimals (at most 6) puts every number on a grid of 10^-F, F the most decimals of
// any bound or multipleOf: a number is N / 10^F plus a rest below one grid step, and a bound on
// the number is a bound on N (with the rest zero or not at the bound itself). The digit strings of
// an interval of N are spelled digit by digit (the classic range-to-regex construction, O(digits^2)
// in size), the decimal point placed F digits from the end. Integers are the case F = 0 without a
// rest; multipleOf q adds the remainder of N mod k (k = q scaled to the grid, at most 100) to the
// construction, as one rule per (digits left, remainder). Numbers the grammar writes have at most
// 16 integer digits and no exponent; a bounded number's decimals come as F digits and then more
// (`0.50` where F = 2), so the grammar is a subset of the valid spellings, never a superset.
#pragma once
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kvasir::grammar {

inline constexpr int kRangeMaxDecimals = 6;
inline constexpr int64_t kRangeMaxModulus = 100;

// Names a helper rule with this body (an existing one when the body repeats).
using MakeRule = std::function<std::string(const std::string& hint, const std::string& body)>;

// True when the schema has any of the keywords above.
bool has_numeric_bounds(const nlohmann::ordered_json& schema);

// The GBNF body that matches the JSON numbers (integers when `integer`) satisfying the schema's
// numeric keywords; an error (invalid_argument) names the keyword it cannot honour exactly.
Result<std::string> numeric_range_gbnf(const nlohmann::ordered_json& schema, bool integer, const std::string& hint,
                                       const MakeRule& make_rule);

}  // namespace kvasir::grammar
