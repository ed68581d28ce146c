// The vocabulary as the matcher sees it: each token's bytes in a trie (so that a mask walks
// shared prefixes once and skips a whole subtree at its first impossible byte), and per
// character set S of a Star symbol a precomputed split of the vocabulary:
//   inside  tokens made only of characters from S (possibly ending inside one that can still be
//           in S): accepted wherever a Star(S) is being matched, whatever follows;
//   rest    every other token, keyed by its bytes from where its leading run of S characters
//           breaks: what a mask must still check against the grammar after the star.
// With Gemma's 262k tokens, a JSON string body's mask is then one bitset OR plus a walk of
// the few thousand tokens that contain a quote, a backslash or a control character.
//
// Built once per model and shared by every request; star tables are made on first use (under a
// lock, at grammar compile time) and kept.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grammar/grammar.h"

namespace kvasir::grammar {

// A byte trie in preorder: node i's subtree is [i, end); its tokens are
// tokens[token_begin[i] .. token_begin[i + 1]). Node 0 is the root (the empty string).
struct Trie {
  struct Node {
    uint32_t end = 0;
    uint32_t token_begin = 0;
    uint32_t depth = 0;
    uint8_t byte = 0;
  };
  std::vector<Node> nodes;
  std::vector<int32_t> tokens;
  uint32_t max_depth = 0;

  // From (bytes, token id) pairs; empty byte strings are left out.
  static Trie build(std::vector<std::pair<std::string_view, int32_t>> entries);
  uint32_t tokens_end(size_t i) const { return i + 1 < nodes.size() ? nodes[i + 1].token_begin : uint32_t(tokens.size()); }
};

struct StarTable {
  std::vector<uint64_t> inside;   // one bit per token id: tokens made of the set's characters only
  std::vector<uint64_t> leading;  // tokens that begin with one of them (for a `+`: at least one)
  Trie rest;                      // the others, keyed by what follows their leading run
};

class TokenIndex {
 public:
  // token_bytes[id]: what the token adds to the text; empty: never allowed by a grammar (control
  // tokens; end of generation is the caller's business).
  explicit TokenIndex(std::vector<std::string> token_bytes);
  size_t size() const { return bytes_.size(); }
  size_t words() const { return (bytes_.size() + 63) / 64; }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  const Trie& trie() const { return trie_; }
  // The table for Star(set), or null where it would not pay: a set without the letters and digits
  // or more of printable ASCII (62 of its 95 characters) leaves few tokens inside it, and the plain trie walk rejects the rest at their first
  // bytes anyway (and its `rest` trie would be nearly the whole vocabulary); also null past
  // kMaxStarTables distinct sets (a hostile grammar cannot make the index grow without bound).
  std::shared_ptr<const StarTable> star_table(const CharSet& set) const;
  static bool worth_a_table(const CharSet& set);
  static constexpr size_t kMaxStarTables = 32;

 private:
  std::vector<std::string> bytes_;
  Trie trie_;
  mutable std::mutex mutex_;
  mutable std::map<std::vector<std::pair<uint32_t, uint32_t>>, std::shared_ptr<const StarTable>> stars_;
};

}  // namespace kvasir::grammar
