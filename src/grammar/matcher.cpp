#include "grammar/matcher.h"

#include <algorithm>

#include "grammar/utf8_decode.h"

namespace kvasir::grammar {
namespace {

constexpr uint32_t kDead = 0;
// Bounds that keep a pathological grammar or output from taking the server down: a deeper
// stack or a wider state is cut (those parses are dropped, never invented), and the state table
// is rebuilt from the current state once it grows past kMaxStates.
constexpr size_t kMaxDepth = 1024;
constexpr size_t kMaxStacks = 2048;
constexpr size_t kMaxExpandSteps = 1 << 16;
constexpr size_t kMaxStates = 8192;
constexpr size_t kMaxCachedMasks = 64;

struct Stack {
  std::vector<uint32_t> pos;  // back() is the next symbol; below it, where each rule returns to
  uint32_t utf8 = 0;          // Utf8Partial state of the top symbol
  bool operator==(const Stack&) const = default;
  bool operator<(const Stack& o) const { return utf8 != o.utf8 ? utf8 < o.utf8 : pos < o.pos; }
};

struct KeyHash {
  size_t operator()(const std::vector<uint32_t>& k) const {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ k.size();
    for (uint32_t v : k) h = (h ^ v) * 0x100000001B3ull, h ^= h >> 29;
    return size_t(h);
  }
};

struct State {
  std::vector<Stack> stacks;  // sorted, unique
  std::unique_ptr<int32_t[]> next;  // per byte: the next state, -1 not computed yet
  int32_t mask = -1;                // index into masks
  bool can_end = false, done = false;
};

}  // namespace

struct Matcher::Impl {
  const CompiledGrammar& g;
  const std::vector<Symbol>& symbols;
  std::vector<State> states;
  std::unordered_map<std::vector<uint32_t>, uint32_t, KeyHash> ids;
  std::vector<std::vector<uint64_t>> masks;
  std::vector<uint32_t> walk_states;

  explicit Impl(const CompiledGrammar& grammar) : g(grammar), symbols(grammar.grammar.symbols) { reset({}); }

  // Empties the tables; interns the dead state (id 0) and `keep` (whose new id is returned).
  uint32_t reset(std::vector<Stack> keep) {
    states.clear();
    ids.clear();
    masks.clear();
    intern({});
    return intern(std::move(keep));
  }

  uint32_t intern(std::vector<Stack> stacks) {
    std::sort(stacks.begin(), stacks.end());
    stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
    std::vector<uint32_t> key;
    key.push_back(uint32_t(stacks.size()));
    for (const Stack& s : stacks) {
      key.push_back(s.utf8);
      key.push_back(uint32_t(s.pos.size()));
      key.insert(key.end(), s.pos.begin(), s.pos.end());
    }
    auto [it, fresh] = ids.try_emplace(std::move(key), uint32_t(states.size()));
    if (!fresh) return it->second;
    State st;
    st.can_end = std::any_of(stacks.begin(), stacks.end(), [](const Stack& s) { return s.pos.empty(); });
    st.done = !stacks.empty() && std::all_of(stacks.begin(), stacks.end(), [](const Stack& s) { return s.pos.empty(); });
    st.stacks = std::move(stacks);
    states.push_back(std::move(st));
    return it->second;
  }

  // Appends the stacks `s` stands for once every rule reference, End and Star exit at its top is
  // resolved: each has a Chars or Star symbol on top, or is empty (the document may end).
  void expand(Stack s, std::vector<Stack>& out) const {
    std::vector<Stack> work;
    work.push_back(std::move(s));
    size_t steps = 0;
    while (!work.empty() && out.size() < kMaxStacks && ++steps < kMaxExpandSteps) {
      Stack st = std::move(work.back());
      work.pop_back();
      while (st.pos.size() <= kMaxDepth) {
        if (st.pos.empty()) {
          out.push_back(std::move(st));
          break;
        }
        const uint32_t q = st.pos.back();
        const Symbol& sym = symbols[q];
        if (sym.kind == Symbol::Kind::End) {
          st.pos.pop_back();
          continue;
        }
        if (sym.kind == Symbol::Kind::Chars) {
          out.push_back(std::move(st));
          break;
        }
        if (sym.kind == Symbol::Kind::Star) {
          Stack exit = st;
          exit.pos.back() = q + 1;
          work.push_back(std::move(exit));
          out.push_back(std::move(st));
          break;
        }
        // A rule: return to the symbol after it (nothing to return to when that ends the
        // alternative: a tail call), then each alternative.
        st.pos.pop_back();
        if (symbols[q + 1].kind != Symbol::Kind::End) st.pos.push_back(q + 1);
        const auto& alts = g.grammar.rules[sym.index];
        for (size_t a = 1; a < alts.size(); ++a) {
          Stack b = st;
          b.pos.push_back(alts[a]);
          work.push_back(std::move(b));
        }
        st.pos.push_back(alts[0]);
      }
    }
  }

  uint32_t step(uint32_t s, uint8_t byte) {
    if (s == kDead) return kDead;
    if (!states[s].next) {
      states[s].next = std::make_unique<int32_t[]>(256);
      std::fill_n(states[s].next.get(), 256, -1);
    }
    if (const int32_t n = states[s].next[byte]; n >= 0) return uint32_t(n);
    std::vector<Stack> out;
    for (const Stack& k : states[s].stacks) {
      if (k.pos.empty()) continue;
      const Symbol& sym = symbols[k.pos.back()];
      const CharSet& set = g.grammar.sets[sym.index];
      Utf8Partial p{k.utf8};
      if (!p.step(byte)) continue;
      if (p.in_progress()) {
        if (p.lo() <= p.hi() && set.intersects(p.lo(), p.hi())) out.push_back({k.pos, p.state});
        continue;
      }
      if (!set.contains(p.complete)) continue;
      Stack n{k.pos, 0};
      if (sym.kind == Symbol::Kind::Chars) n.pos.back() += 1;
      expand(std::move(n), out);
    }
    const uint32_t id = intern(std::move(out));
    states[s].next[byte] = int32_t(id);
    return id;
  }

  uint32_t step(uint32_t s, std::string_view bytes) {
    for (char c : bytes) {
      s = step(s, uint8_t(c));
      if (s == kDead) break;
    }
    return s;
  }

  // Sets the bit of every token of `t` whose bytes lead somewhere from `start`.
  void walk(const Trie& t, uint32_t start, std::vector<uint64_t>& bits) {
    if (start == kDead || t.nodes.size() <= 1) return;
    walk_states.resize(t.max_depth + 1);
    walk_states[0] = start;
    for (size_t i = 1; i < t.nodes.size();) {
      const Trie::Node& n = t.nodes[i];
      const uint32_t s = step(walk_states[n.depth - 1], n.byte);
      if (s == kDead) {
        i = n.end;
        continue;
      }
      walk_states[n.depth] = s;
      for (uint32_t k = n.token_begin, e = t.tokens_end(i); k < e; ++k) {
        const auto id = uint32_t(t.tokens[k]);
        bits[id / 64] |= uint64_t(1) << (id % 64);
      }
      ++i;
    }
  }

  const std::vector<uint64_t>& mask(uint32_t s) {
    if (states[s].mask >= 0) return masks[size_t(states[s].mask)];
    if (masks.size() >= kMaxCachedMasks) {
      masks.clear();
      for (State& st : states) st.mask = -1;
    }
    std::vector<uint64_t> bits(g.tokens->words(), 0);
    const std::vector<Stack> stacks = states[s].stacks;  // interning below may move states
    std::vector<Stack> covered, others;
    // The stacks after a star of set `set` (its symbol `skip` - 1 places past k's top), when
    // nothing there can begin with one of its characters: then a token's leading run of them is
    // all the star's, and the rest must follow the star (the star's tables are exact).
    auto disjoint_after = [&](const Stack& k, size_t skip, const CharSet& set, std::vector<Stack>& after) {
      Stack exit = k;
      exit.pos.back() += uint32_t(skip);
      expand(std::move(exit), after);
      return std::all_of(after.begin(), after.end(), [&](const Stack& a) {
        return a.pos.empty() || !g.grammar.sets[symbols[a.pos.back()].index].intersects(set);
      });
    };
    for (const Stack& k : stacks) {
      if (k.pos.empty()) continue;
      const Symbol& sym = symbols[k.pos.back()];
      std::vector<Stack> after;
      if (sym.kind == Symbol::Kind::Star && k.utf8 == 0 && g.stars[sym.index] &&
          disjoint_after(k, 1, g.grammar.sets[sym.index], after)) {
        const StarTable& table = *g.stars[sym.index];
        for (size_t w = 0; w < bits.size(); ++w) bits[w] |= table.inside[w];
        covered.insert(covered.end(), after.begin(), after.end());
        walk(table.rest, intern(std::move(after)), bits);
        continue;
      }
      // `[S]+` (Chars(S) then Star(S)): the star's tables too, keeping only tokens that begin
      // with a character of S (a trie walk here would visit most of the vocabulary).
      after.clear();
      if (sym.kind == Symbol::Kind::Chars && k.utf8 == 0 && k.pos.back() + 1 < symbols.size() &&
          symbols[k.pos.back() + 1].kind == Symbol::Kind::Star && symbols[k.pos.back() + 1].index == sym.index &&
          g.stars[sym.index] && disjoint_after(k, 2, g.grammar.sets[sym.index], after)) {
        const StarTable& table = *g.stars[sym.index];
        std::vector<uint64_t> plus = table.inside;
        walk(table.rest, intern(std::move(after)), plus);
        for (size_t w = 0; w < bits.size(); ++w) bits[w] |= plus[w] & table.leading[w];
        continue;
      }
      others.push_back(k);
    }
    // A stack after a star is covered by the star's walk (its tokens are the star's with an
    // empty run); walking it again over the whole vocabulary would only cost time.
    std::sort(covered.begin(), covered.end());
    std::erase_if(others, [&](const Stack& k) { return std::binary_search(covered.begin(), covered.end(), k); });
    if (!others.empty()) walk(g.tokens->trie(), intern(std::move(others)), bits);
    masks.push_back(std::move(bits));
    states[s].mask = int32_t(masks.size() - 1);
    return masks.back();
  }
};

std::shared_ptr<const CompiledGrammar> compile(Grammar grammar, std::shared_ptr<const TokenIndex> tokens) {
  auto g = std::make_shared<CompiledGrammar>();
  g->stars.resize(grammar.sets.size());
  for (const Symbol& s : grammar.symbols)
    if (s.kind == Symbol::Kind::Star && !g->stars[s.index]) g->stars[s.index] = tokens->star_table(grammar.sets[s.index]);
  g->grammar = std::move(grammar);
  g->tokens = std::move(tokens);
  return g;
}

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar) : g_(std::move(grammar)) {
  impl_ = std::make_unique<Impl>(*g_);
  std::vector<Stack> start;
  for (uint32_t alt : g_->grammar.rules[g_->grammar.root]) impl_->expand(Stack{{alt}, 0}, start);
  current_ = impl_->intern(std::move(start));
}

Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;
Matcher::~Matcher() = default;

std::span<const uint64_t> Matcher::mask() { return impl_->mask(current_); }
bool Matcher::can_end() const { return impl_->states[current_].can_end; }
bool Matcher::done() const { return impl_->states[current_].done; }
bool Matcher::dead() const { return current_ == kDead; }
size_t Matcher::num_states() const { return impl_->states.size(); }

bool Matcher::allowed(int32_t token) {
  if (token < 0 || size_t(token) >= g_->tokens->size()) return false;
  const std::string& b = g_->tokens->bytes(token);
  return !b.empty() && impl_->step(current_, b) != kDead;
}

bool Matcher::accept(int32_t token) {
  if (token < 0 || size_t(token) >= g_->tokens->size()) return false;
  const std::string& b = g_->tokens->bytes(token);
  return !b.empty() && accept_bytes(b);
}

bool Matcher::accept_bytes(std::string_view bytes) {
  const uint32_t next = impl_->step(current_, bytes);
  if (next == kDead) return false;
  current_ = next;
  if (impl_->states.size() > kMaxStates) current_ = impl_->reset(impl_->states[current_].stacks);
  return true;
}

}  // namespace kvasir::grammar
