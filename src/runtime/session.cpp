#include "runtime/session.h"

#include <string>

namespace kvasir::runtime {

RunnerOptions SessionOptions::runner_options() const {
  RunnerOptions o{.device = device, .max_batch_tokens = max_batch_tokens, .n_threads = n_threads, .kv = kv};
  const int64_t bs = std::max<int64_t>(kv.block_size, 1);
  o.kv.n_blocks = std::max<int64_t>((n_ctx + bs - 1) / bs, 2);  // a runner holds 2 blocks at least
  return o;
}

Result<std::unique_ptr<Session>> Session::create(std::unique_ptr<ModelRunner> runner, int64_t n_ctx) {
  if (!runner) return Error{"a session needs a runner", ErrorCode::invalid_argument};
  const RunnerInfo& info = runner->info();
  const int64_t holds = info.n_kv_blocks * info.block_size;
  if (n_ctx <= 0) n_ctx = holds;
  if (n_ctx > holds)
    return Error{"a context of " + std::to_string(n_ctx) + " tokens exceeds the runner's KV of " + std::to_string(holds),
                 ErrorCode::invalid_argument};
  return std::unique_ptr<Session>(new Session(std::move(runner), n_ctx));
}

Session::Session(std::unique_ptr<ModelRunner> runner, int64_t n_ctx) : runner_(std::move(runner)), n_ctx_(n_ctx) {
  // One sequence owns the blocks its context needs, in order.
  const int64_t bs = runner_->info().block_size;
  block_table_.resize(size_t((n_ctx_ + bs - 1) / bs));
  for (size_t i = 0; i < block_table_.size(); ++i) block_table_[i] = int32_t(i);
}

Status Session::eval(std::span<const int32_t> tokens, bool all_logits, const LogitsSink& on_logits) {
  if (n_past_ + int64_t(tokens.size()) > n_ctx_)
    return Error{"context full: " + std::to_string(n_past_) + " + " + std::to_string(tokens.size()) +
                 " tokens exceed the context of " + std::to_string(n_ctx_)};
  const int64_t chunk = runner_->info().max_batch_tokens;
  const int64_t n_vocab = runner_->info().n_vocab;
  for (size_t start = 0; start < tokens.size(); start += size_t(chunk)) {
    const size_t end = std::min(tokens.size(), start + size_t(chunk));
    batch_.clear();
    batch_.add_sequence(block_table_);
    for (size_t i = start; i < end; ++i)
      batch_.add(tokens[i], int32_t(n_past_ + int64_t(i)), 0, all_logits || i + 1 == tokens.size());
    auto logits = runner_->forward(batch_);
    if (!logits) return Error{logits.error(), logits.error_code()};
    int64_t row = 0;
    for (size_t i = start; i < end; ++i)
      if (batch_.want_logits[i - start]) on_logits(int64_t(i), *logits + (row++) * n_vocab);
  }
  n_past_ += int64_t(tokens.size());
  return {};
}

}  // namespace kvasir::runtime
