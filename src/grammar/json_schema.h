// JSON Schema -> GBNF text (then parse_gbnf), so a schema's grammar can be printed and read.
//
// Every document the grammar admits validates against the schema; where the schema admits more
// (additional properties, extra array items past prefixItems) the grammar produces the plainer
// subset. Supported: type (and type lists), properties / required (in the schema's order, then
// optional ones in order), additionalProperties (false; true or a schema on an object without
// properties), items, prefixItems, minItems / maxItems, enum, const, anyOf, oneOf (as anyOf),
// allOf of object schemas, $ref into #/$defs, #/definitions or # (recursion allowed), string
// minLength / maxLength, pattern (a regular-expression subset), format (date, time, date-time,
// uuid), integer minimum 0 or 1; annotations (title, description, default, examples, ...) are
// ignored. Anything else is refused with an error that names the keyword.
//
// Whitespace between tokens is at most a newline and 20 spaces or tabs, or one space, and numbers
// have at most 16 integer digits, 16 fraction digits and 2 exponent digits (integers fit in 64
// bits, numbers in a double): a model cannot spin in an endless run of blanks or digits.
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

Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema);

// Several schemas in one grammar (tool calls: one per function): add() returns the rule that
// matches a schema's documents; gbnf() is the grammar text with `root ::= root_body`, every
// rule added so far and the JSON primitives (ws, string, number, value, ...).
class SchemaGrammar {
 public:
  SchemaGrammar();
  ~SchemaGrammar();
  Result<std::string> add(const nlohmann::ordered_json& schema, const std::string& hint);
  std::string gbnf(const std::string& root_body) const;

 private:
  class Converter;
  std::unique_ptr<Converter> c_;
};

// A GBNF string literal that matches `text` exactly.
std::string gbnf_literal(std::string_view text);
Result<Grammar> compile_json_schema(const nlohmann::ordered_json& schema);
// Any JSON object (response_format {"type": "json_object"}).
std::string json_object_gbnf();

}  // namespace kvasir::grammar
