// Grammar-constrained decoding: which tokens may come next, and the state after one.
//
// A CompiledGrammar is a Grammar bound to a vocabulary (its TokenIndex and the star tables its
// Star symbols need), immutable and shared by every request that uses the same schema.
//
// A Matcher (one per request) runs it as a pushdown automaton over bytes: a state is the set of
// parse stacks consistent with the text so far (positions into the grammar's symbols, the top
// one next; a rule reference is expanded into its alternatives at once, a tail call pushes
// nothing, so a repetition keeps the stack flat). States are interned and their byte
// transitions memoized, so a state seen again costs a table lookup; masks are cached per state.
//
// mask(): bit t set when token t's bytes can extend the text toward a document of the grammar.
// A stack whose top is Star(S) takes S's precomputed `inside` set whole and walks only the
// star's `rest` trie from the state after the star (exact when no character of S can also
// begin what follows the star; otherwise, and for every other stack, the vocabulary trie is
// walked, skipping a subtree at its first impossible byte). End of generation is allowed when
// can_end(): the caller adds the model's end tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/token_index.h"

namespace kvasir::grammar {

struct CompiledGrammar {
  Grammar grammar;
  std::shared_ptr<const TokenIndex> tokens;
  std::vector<std::shared_ptr<const StarTable>> stars;  // per set index; null for sets no Star uses
};

std::shared_ptr<const CompiledGrammar> compile(Grammar grammar, std::shared_ptr<const TokenIndex> tokens);

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;
  ~Matcher();

  // Allowed tokens from the current state, one bit per token id (TokenIndex::words() words).
  std::span<const uint64_t> mask();
  bool allowed(int32_t token);              // one token, without a whole mask
  bool can_end() const;                     // the text so far is a complete document
  bool done() const;                        // ... and nothing may follow it
  bool dead() const;                        // no document starts with the text (never after accept())
  // Advances over the token's bytes; false (and no change) when the grammar does not allow it.
  bool accept(int32_t token);
  bool accept_bytes(std::string_view bytes);  // the same for raw text
  uint32_t state() const { return current_; }  // an id, valid until the next accept()
  size_t num_states() const;  // interned so far (tests, limits)

 private:
  struct Impl;
  std::shared_ptr<const CompiledGrammar> g_;
  std::unique_ptr<Impl> impl_;
  uint32_t current_ = 0;
};

}  // namespace kvasir::grammar
