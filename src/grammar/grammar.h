// A context-free grammar over Unicode code points, the one form that GBNF, JSON Schema and tool
// calls all compile to, and that the token-mask matcher runs.
//
// Rules are alternatives of symbol sequences, laid out flat: `symbols` holds every alternative
// as a run of symbols ended by an End symbol, so a position (an index into `symbols`) says both
// what comes next and, after it, the rest of the alternative. Symbols:
//   Chars(set)  one code point from a set of ranges;
//   Star(set)   zero or more code points from a set (the shape of JSON string bodies, digit runs
//               and whitespace, which the matcher masks from precomputed tables);
//   Rule(r)     a reference; End closes an alternative.
// Repetition, optionals and groups are rewritten into helper rules by the front ends.
// validate() refuses what the matcher cannot run: undefined rules, left recursion (which would
// expand forever), and grammars past the size limits.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kvasir::grammar {

// Code-point ranges [lo, hi], sorted, disjoint and not adjacent, surrogates (D800-DFFF) removed.
struct CharSet {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;

  static CharSet of(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated = false);
  static CharSet single(uint32_t cp) { return of({{cp, cp}}); }
  bool contains(uint32_t cp) const;
  bool intersects(uint32_t lo, uint32_t hi) const;  // any member in [lo, hi]
  bool intersects(const CharSet& other) const;
  bool operator==(const CharSet&) const = default;
};

struct Symbol {
  enum class Kind : uint8_t { End, Chars, Star, Rule };
  Kind kind = Kind::End;
  uint32_t index = 0;  // into Grammar::sets (Chars, Star) or Grammar::rules (Rule)
};

struct Grammar {
  std::vector<CharSet> sets;
  std::vector<Symbol> symbols;                    // every alternative, each ended by End
  std::vector<std::vector<uint32_t>> rules;       // per rule: the start position of each alternative
  std::vector<std::string> rule_names;
  uint32_t root = 0;

  // Limits that keep a hostile grammar from costing the server: symbols and rules.
  static constexpr size_t kMaxSymbols = 1 << 20;
  static constexpr size_t kMaxRules = 1 << 16;

  Status validate() const;
};

// Builds a Grammar: rules are declared by name (forward references allowed), alternatives added
// as symbol lists. Sets are deduplicated.
class Builder {
 public:
  uint32_t rule(const std::string& name);  // the id of `name`, declared on first use
  uint32_t fresh_rule(const std::string& base);  // a new helper rule named base#N
  void add_alternative(uint32_t rule, const std::vector<Symbol>& seq);
  Symbol chars(const CharSet& set);
  Symbol star(const CharSet& set);
  static Symbol ref(uint32_t rule) { return {Symbol::Kind::Rule, rule}; }
  bool defined(uint32_t rule) const { return defined_[rule]; }
  const std::string& name(uint32_t rule) const { return names_[rule]; }
  size_t num_rules() const { return names_.size(); }
  // Finishes with `root` as the start rule; validates.
  Result<Grammar> build(const std::string& root);

 private:
  uint32_t set_index(const CharSet& set);
  uint32_t declare(std::string name);
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> index_;
  std::vector<bool> defined_;
  std::vector<std::vector<std::vector<Symbol>>> alts_;
  std::vector<CharSet> sets_;
  std::map<std::vector<std::pair<uint32_t, uint32_t>>, uint32_t> set_index_;
  size_t num_symbols_ = 0;
  bool too_big_ = false;
};

}  // namespace kvasir::grammar
