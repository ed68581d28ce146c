#include "engine/grammar_constraint.h"

#include <limits>
#include <string_view>

namespace kvasir::engine {

GrammarConstraint::GrammarConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar, std::string trigger,
                                     const Tokenizer& tokenizer, std::vector<int32_t> end_ids)
    : grammar_(std::move(grammar)), trigger_(std::move(trigger)), tokenizer_(tokenizer), end_ids_(std::move(end_ids)) {
  if (trigger_.empty()) matcher_.emplace(grammar_);
}

bool GrammarConstraint::apply(std::span<float> row, RowContext& ctx) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  grammar::Matcher& m = *matcher_;
  ends_.clear();
  if (m.can_end())
    for (int32_t t : end_ids_) ends_.push_back({t, row[size_t(t)]});
  const std::span<const uint64_t> mask = m.mask();
  bool any = false;
  for (size_t w = 0, n = row.size(); w * 64 < n; ++w) {
    const uint64_t bits = w < mask.size() ? mask[w] : 0;
    any |= bits != 0;
    if (bits == ~uint64_t(0)) continue;
    for (size_t i = w * 64, e = std::min(n, i + 64); i < e; ++i)
      if (!((bits >> (i - w * 64)) & 1)) row[i] = kNegInf;
  }
  for (const auto& [t, v] : ends_) row[size_t(t)] = v;
  ctx.may_end = m.done();
  ctx.only_end = !any && !ends_.empty();
  return any || !ends_.empty();
}

GrammarConstraint::Step GrammarConstraint::observe(int32_t token) {
  if (!matcher_) return trigger_failed_ ? Step{} : watch_trigger(token);
  if (!matcher_->accept(token)) return {.refused = true};
  return {.done = matcher_->done()};
}

// Looks for the trigger in the output's last bytes. Once found, the grammar starts there and takes
// the trigger and whatever followed it in the same token; should it refuse them (it cannot, when
// the grammar begins with the trigger), the output stays free.
GrammarConstraint::Step GrammarConstraint::watch_trigger(int32_t token) {
  const size_t before = tail_.size();
  tail_ += tokenizer_.piece(token);
  const size_t from = before >= trigger_.size() ? before - trigger_.size() + 1 : 0;
  const size_t at = tail_.find(trigger_, from);
  if (at == std::string::npos) {
    if (tail_.size() > trigger_.size()) tail_.erase(0, tail_.size() - trigger_.size());
    return {};
  }
  matcher_.emplace(grammar_);
  if (!matcher_->accept_bytes(std::string_view(tail_).substr(at))) {
    matcher_.reset();
    trigger_failed_ = true;
    return {};
  }
  return {.triggered = true, .done = matcher_->done()};
}

}  // namespace kvasir::engine
