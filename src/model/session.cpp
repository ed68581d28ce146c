#include "model/session.h"

#include <algorithm>
#include <string>

namespace kvasir {

Result<std::unique_ptr<Session>> Session::create(const Model& model, const SessionOptions& o) {
  if (o.n_ctx <= 0) return Error{"context size must be positive"};
  const int64_t num_blocks = (o.n_ctx + o.block_size - 1) / o.block_size;
  auto kv = KvCache::create(model.config(), {.num_blocks = num_blocks, .block_size = o.block_size, .type = o.kv_type,
                                             .layer_types = o.kv_layer_types, .rotate_k = o.kv_rotate_k,
                                             .transform = o.kv_transform});
  if (!kv) return Error{kv.error()};
  return std::unique_ptr<Session>(new Session(model, o, std::move(*kv)));
}

Session::Session(const Model& model, const SessionOptions& o, KvCache kv)
    : model_(model),
      n_ctx_(o.n_ctx),
      forward_(std::make_unique<Forward>(model, ForwardOptions{o.max_batch_tokens, o.num_threads})),
      kv_(std::move(kv)) {
  // One sequence owns every block, in order.
  block_table_.resize(size_t(kv_.num_blocks()));
  for (size_t i = 0; i < block_table_.size(); ++i) block_table_[i] = int32_t(i);
}

Status Session::eval(std::span<const int32_t> tokens, bool all_logits, const LogitsSink& on_logits) {
  if (n_past_ + int64_t(tokens.size()) > n_ctx_)
    return Error{"context full: " + std::to_string(n_past_) + " + " + std::to_string(tokens.size()) +
                 " tokens exceed the context of " + std::to_string(n_ctx_)};
  const int64_t chunk = forward_->max_batch_tokens();
  for (size_t start = 0; start < tokens.size(); start += size_t(chunk)) {
    const size_t end = std::min(tokens.size(), start + size_t(chunk));
    batch_.clear();
    batch_.block_tables.push_back(&block_table_);
    for (size_t i = start; i < end; ++i)
      batch_.add(tokens[i], int32_t(n_past_ + int64_t(i)), 0, all_logits || i + 1 == tokens.size());
    auto logits = forward_->forward(batch_, kv_);
    if (!logits) return Error{logits.error()};
    const int64_t n_vocab = model_.config().n_vocab;
    int64_t row = 0;
    for (size_t i = start; i < end; ++i)
      if (batch_.want_logits[i - start]) on_logits(int64_t(i), *logits + (row++) * n_vocab);
  }
  n_past_ += int64_t(tokens.size());
  return {};
}

}  // namespace kvasir
