#include "grammar/grammar.h"

#include <algorithm>

namespace kvasir::grammar {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

Error invalid(std::string message) { return Error{std::move(message), ErrorCode::invalid_argument}; }

}  // namespace

CharSet CharSet::of(std::vector<std::pair<uint32_t, uint32_t>> in, bool negated) {
  std::vector<std::pair<uint32_t, uint32_t>> r;
  for (auto [lo, hi] : in) {
    if (lo > hi) std::swap(lo, hi);
    if (lo > kMaxCodePoint) continue;
    r.push_back({lo, std::min(hi, kMaxCodePoint)});
  }
  std::sort(r.begin(), r.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (auto range : r) {
    if (!merged.empty() && range.first <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, range.second);
    else
      merged.push_back(range);
  }
  if (negated) {
    std::vector<std::pair<uint32_t, uint32_t>> complement;
    uint32_t next = 0;
    for (auto [lo, hi] : merged) {
      if (lo > next) complement.push_back({next, lo - 1});
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) complement.push_back({next, kMaxCodePoint});
    merged = std::move(complement);
  }
  // Surrogates are not characters: no valid UTF-8 encodes them.
  CharSet s;
  for (auto [lo, hi] : merged) {
    if (hi < kSurrogateLo || lo > kSurrogateHi) {
      s.ranges.push_back({lo, hi});
      continue;
    }
    if (lo < kSurrogateLo) s.ranges.push_back({lo, kSurrogateLo - 1});
    if (hi > kSurrogateHi) s.ranges.push_back({kSurrogateHi + 1, hi});
  }
  return s;
}

bool CharSet::contains(uint32_t cp) const { return intersects(cp, cp); }

bool CharSet::intersects(uint32_t lo, uint32_t hi) const {
  // The first range ending at or after lo.
  auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                             [](const std::pair<uint32_t, uint32_t>& r, uint32_t v) { return r.second < v; });
  return it != ranges.end() && it->first <= hi;
}

bool CharSet::intersects(const CharSet& other) const {
  for (auto [lo, hi] : other.ranges)
    if (intersects(lo, hi)) return true;
  return false;
}

Status Grammar::validate() const {
  if (root >= rules.size()) return invalid("grammar: no root rule");
  if (symbols.size() > kMaxSymbols || rules.size() > kMaxRules) return Error{"grammar: too large", ErrorCode::too_large};
  for (size_t r = 0; r < rules.size(); ++r)
    if (rules[r].empty()) return invalid("grammar: rule '" + rule_names[r] + "' is referenced but not defined");
  // nullable[r]: the rule can match the empty string (a fixpoint over the alternatives).
  std::vector<bool> nullable(rules.size(), false);
  auto symbol_nullable = [&](const Symbol& s) {
    return s.kind == Symbol::Kind::Star || (s.kind == Symbol::Kind::Rule && nullable[s.index]);
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (nullable[r]) continue;
      for (uint32_t start : rules[r]) {
        size_t p = start;
        while (symbols[p].kind != Symbol::Kind::End && symbol_nullable(symbols[p])) ++p;
        if (symbols[p].kind == Symbol::Kind::End) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // Left recursion: a rule reachable from itself before any code point is consumed.
  std::vector<std::vector<uint32_t>> left(rules.size());
  for (size_t r = 0; r < rules.size(); ++r)
    for (uint32_t start : rules[r])
      for (size_t p = start; symbols[p].kind != Symbol::Kind::End; ++p) {
        if (symbols[p].kind == Symbol::Kind::Rule) left[r].push_back(symbols[p].index);
        if (!symbol_nullable(symbols[p])) break;
      }
  // Depth-first with an explicit stack (a rule count of 2^16 must not exhaust a thread's stack).
  std::vector<uint8_t> color(rules.size(), 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<uint32_t, size_t>> path;  // (rule, next edge)
  for (uint32_t start = 0; start < rules.size(); ++start) {
    if (color[start] != 0) continue;
    path.push_back({start, 0});
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, edge] = path.back();
      if (edge == left[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t n = left[r][edge++];
      if (color[n] == 1) return invalid("grammar: rule '" + rule_names[n] + "' is left-recursive");
      if (color[n] == 0) {
        color[n] = 1;
        path.push_back({n, 0});
      }
    }
  }
  return {};
}

uint32_t Builder::declare(std::string name) {
  index_[name] = uint32_t(names_.size());
  names_.push_back(std::move(name));
  defined_.push_back(false);
  alts_.emplace_back();
  if (names_.size() > Grammar::kMaxRules) too_big_ = true;
  return uint32_t(names_.size() - 1);
}

uint32_t Builder::rule(const std::string& name) {
  if (auto it = index_.find(name); it != index_.end()) return it->second;
  return declare(name);
}

// '#' cannot appear in a GBNF rule name, so a helper never takes a name the grammar uses.
uint32_t Builder::fresh_rule(const std::string& base) { return declare(base + "#" + std::to_string(names_.size())); }

void Builder::add_alternative(uint32_t r, const std::vector<Symbol>& seq) {
  defined_[r] = true;
  num_symbols_ += seq.size() + 1;
  if (num_symbols_ > Grammar::kMaxSymbols) {
    too_big_ = true;
    return;
  }
  alts_[r].push_back(seq);
}

uint32_t Builder::set_index(const CharSet& set) {
  if (auto it = set_index_.find(set.ranges); it != set_index_.end()) return it->second;
  set_index_[set.ranges] = uint32_t(sets_.size());
  sets_.push_back(set);
  return uint32_t(sets_.size() - 1);
}

Symbol Builder::chars(const CharSet& set) { return {Symbol::Kind::Chars, set_index(set)}; }
Symbol Builder::star(const CharSet& set) { return {Symbol::Kind::Star, set_index(set)}; }

Result<Grammar> Builder::build(const std::string& root) {
  if (too_big_) return Error{"grammar: too large (more than 2^20 symbols or 2^16 rules)", ErrorCode::too_large};
  Grammar g;
  g.sets = sets_;
  g.rule_names = names_;
  g.rules.resize(names_.size());
  for (size_t r = 0; r < names_.size(); ++r)
    for (const auto& seq : alts_[r]) {
      g.rules[r].push_back(uint32_t(g.symbols.size()));
      g.symbols.insert(g.symbols.end(), seq.begin(), seq.end());
      g.symbols.push_back({Symbol::Kind::End, 0});
    }
  auto it = index_.find(root);
  if (it == index_.end()) return invalid("grammar: no rule named '" + root + "'");
  g.root = it->second;
  if (auto s = g.validate(); !s) return Error{s.error(), s.error_code()};
  return g;
}

}  // namespace kvasir::grammar
