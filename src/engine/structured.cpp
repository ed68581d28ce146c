#include "engine/structured.h"

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"

namespace kvasir::engine {

std::shared_ptr<const grammar::TokenIndex> grammar_token_index(const Tokenizer& tokenizer) {
  std::vector<std::string> bytes(size_t(tokenizer.n_vocab()));
  for (int32_t id = 0; id < tokenizer.n_vocab(); ++id)
    if (!tokenizer.is_special(id)) bytes[size_t(id)] = tokenizer.piece(id);
  return std::make_shared<grammar::TokenIndex>(std::move(bytes));
}

GrammarCache::GrammarCache(std::shared_ptr<const grammar::TokenIndex> tokens, grammar::JsonWhitespace whitespace,
                           size_t capacity)
    : tokens_(std::move(tokens)), whitespace_(whitespace), capacity_(capacity) {}

namespace {
Result<grammar::Grammar> build(const GrammarSpec& spec, grammar::JsonWhitespace whitespace) {
  switch (spec.kind) {
    case GrammarSpec::Kind::gbnf:
      return grammar::parse_gbnf(spec.text);
    case GrammarSpec::Kind::json_object:
      return grammar::parse_gbnf(grammar::json_object_gbnf(whitespace));
    case GrammarSpec::Kind::json_schema: {
      auto schema = nlohmann::ordered_json::parse(spec.text, nullptr, false);
      if (schema.is_discarded()) return Error{"json_schema: not valid JSON", ErrorCode::invalid_argument};
      return grammar::compile_json_schema(schema, whitespace);
    }
  }
  return Error{"unknown grammar kind", ErrorCode::internal};
}
}  // namespace

Result<std::shared_ptr<const grammar::CompiledGrammar>> GrammarCache::get(const GrammarSpec& spec) {
  const std::string key = std::to_string(int(spec.kind)) + ":" + spec.text;
  {
    std::lock_guard lock(mutex_);
    if (auto it = map_.find(key); it != map_.end()) {
      order_.splice(order_.begin(), order_, it->second.second);
      return it->second.first;
    }
  }
  auto g = build(spec, whitespace_);
  if (!g) return Error{g.error(), g.error_code() == ErrorCode::unknown ? ErrorCode::invalid_argument : g.error_code()};
  auto compiled = grammar::compile(std::move(*g), tokens_);
  std::lock_guard lock(mutex_);
  if (auto it = map_.find(key); it != map_.end()) return it->second.first;  // compiled meanwhile
  order_.push_front(key);
  map_[key] = {compiled, order_.begin()};
  while (map_.size() > capacity_) {
    map_.erase(order_.back());
    order_.pop_back();
  }
  return std::shared_ptr<const grammar::CompiledGrammar>(compiled);
}

}  // namespace kvasir::engine
