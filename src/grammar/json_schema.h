// JSON Schema -> GBNF text (then parse_gbnf), so a schema's grammar can be printed and read.
//
// Every document the grammar admits validates against the schema; where the schema admits more
// (additional properties, extra array items past prefixItems) the grammar produces the plainer
// subset. Supported: type (and type lists), properties / required (in the schema's order, then
// optional ones in order), additionalProperties (false; true or a schema on an object without
// properties), items, prefixItems, minItems / maxItems, enum, const, anyOf, oneOf (as anyOf),
// allOf of object schemas, $ref into #/$defs, #/definitions or # (recursion allowed), string
// minLength / maxLength, pattern (a regular-expression subset), format (date, time, date-time,
// uuid, email, uri, ipv4), minimum / maximum / exclusiveMinimum / exclusiveMaximum / multipleOf
// on integers and numbers (exact: grammar/number_range.h); annotations (title, description,
// default, examples, ...) are ignored. Anything else is refused with an error that names the
// keyword.
//
// Whitespace is bounded by default: one space or a line break with up to 8 spaces (or 2 tabs)
// after a structural token or a value, at most one space around a member's colon, so that a
// document ends within a few tokens of its content (JsonWhitespace::any opts out: any run of
// blanks anywhere). Numbers have at most 16 integer digits, 16 fraction digits and 2 exponent
// digits (integers fit in 64 bits, numbers in a double): a model cannot spin in digits.
//
// Compilation is budgeted while it runs, not judged afterwards: the limits below are checked as
// rules are made and nodes visited, so a hostile schema costs at most about their worth in time
// and memory (the grammar is linear in the schema; N optional properties make O(N) rules), and
// the refusal (invalid_argument, a 400) names the limit it hit.
#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace kvasir::grammar {

inline constexpr size_t kSchemaMaxRules = 30000;           // grammar rules
inline constexpr size_t kSchemaMaxGrammarBytes = 1u << 20;  // grammar text (GBNF's own limit, kMaxGbnfBytes)
inline constexpr size_t kSchemaMaxSteps = 1u << 20;         // nodes visited, $refs followed, branch pairs compared
inline constexpr size_t kSchemaMaxBranches = 1024;          // entries of one anyOf, enum or type list
inline constexpr size_t kSchemaMaxOneOf = 64;               // branches of one oneOf (checked pairwise for overlap)
// Optional properties of one object: after each member any later one may follow, so the
// matcher follows that many parses at once (its own bound is 2048).
inline constexpr size_t kSchemaMaxOptionalProperties = 1024;
inline constexpr std::chrono::milliseconds kSchemaMaxTime{250};

enum class JsonWhitespace { bounded, any };

Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                        JsonWhitespace whitespace = JsonWhitespace::bounded);

// Several schemas in one grammar (tool calls: one per function): add() returns the rule that
// matches a schema's documents; gbnf() is the grammar text with `root ::= root_body`, every
// rule added so far and the JSON primitives (ws, sp, string, number, value, ...).
class SchemaGrammar {
 public:
  explicit SchemaGrammar(JsonWhitespace whitespace = JsonWhitespace::bounded);
  ~SchemaGrammar();
  Result<std::string> add(const nlohmann::ordered_json& schema, const std::string& hint);
  std::string gbnf(const std::string& root_body) const;

 private:
  class Converter;
  std::unique_ptr<Converter> c_;
};

// A GBNF string literal that matches `text` exactly.
std::string gbnf_literal(std::string_view text);
Result<Grammar> compile_json_schema(const nlohmann::ordered_json& schema,
                                    JsonWhitespace whitespace = JsonWhitespace::bounded);
// Any JSON object (response_format {"type": "json_object"}).
std::string json_object_gbnf(JsonWhitespace whitespace = JsonWhitespace::bounded);

}  // namespace kvasir::grammar
