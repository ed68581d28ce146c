// Structured output for the engine's callers: a grammar named by a request (GBNF text, a JSON
// Schema, or "any JSON object") compiled against the model's vocabulary, cached, and shared by
// every request that names the same one. The engine runs it per request (GenerationParams::grammar).
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/status.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::engine {

struct GrammarSpec {
  enum class Kind { gbnf, json_schema, json_object };
  Kind kind = Kind::json_object;
  std::string text;  // GBNF, or the schema as JSON text; empty for json_object
};

// The vocabulary as grammars see it: each token's bytes, control tokens left out (end of
// generation is the engine's to allow).
std::shared_ptr<const grammar::TokenIndex> grammar_token_index(const Tokenizer& tokenizer);

// Compiled grammars by spec, least recently used dropped past `capacity`. Thread-safe; a compile
// runs outside the lock. Errors are invalid_argument (a 400) naming what is wrong. JSON grammars
// (schemas, json_object, and the tool-call grammars callers build) use `whitespace`.
class GrammarCache {
 public:
  explicit GrammarCache(std::shared_ptr<const grammar::TokenIndex> tokens,
                        grammar::JsonWhitespace whitespace = grammar::JsonWhitespace::bounded, size_t capacity = 64);
  grammar::JsonWhitespace whitespace() const { return whitespace_; }
  Result<std::shared_ptr<const grammar::CompiledGrammar>> get(const GrammarSpec& spec);
  const std::shared_ptr<const grammar::TokenIndex>& tokens() const { return tokens_; }

 private:
  std::shared_ptr<const grammar::TokenIndex> tokens_;
  grammar::JsonWhitespace whitespace_;
  size_t capacity_;
  std::mutex mutex_;
  std::list<std::string> order_;  // most recent first
  std::unordered_map<std::string, std::pair<std::shared_ptr<const grammar::CompiledGrammar>, std::list<std::string>::iterator>> map_;
};

}  // namespace kvasir::engine
