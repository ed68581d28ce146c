#include "spec/model_drafter.h"

#include <algorithm>
#include <unordered_set>

namespace kvasir::spec {

Result<std::unique_ptr<ModelDrafter>> ModelDrafter::create(std::unique_ptr<runtime::ModelRunner> runner, KvMode kv_mode,
                                                           std::vector<int32_t> token_of_logit,
                                                           int64_t n_vocab_target, std::function<int64_t()> clock) {
  if (!runner || !clock) return Error{"no draft runner or clock", ErrorCode::invalid_argument};
  const runtime::RunnerInfo& info = runner->info();
  if (!token_of_logit.empty() && int64_t(token_of_logit.size()) != info.n_vocab)
    return Error{"the draft head's token map does not match its logits", ErrorCode::invalid_argument};
  if (info.max_batch_tokens < 1) return Error{"the draft runner needs a batch size", ErrorCode::invalid_argument};
  std::optional<kv::KvManager> kv;
  if (kv_mode == KvMode::own) {
    if (info.n_kv_blocks < 2 || info.n_kv_blocks > (int64_t(1) << 30))
      return Error{"the draft runner needs at least 2 KV blocks", ErrorCode::invalid_argument};
    auto m = kv::KvManager::create({.num_blocks = int32_t(info.n_kv_blocks),
                                    .block_size = int32_t(info.block_size),
                                    .enable_prefix_cache = false,
                                    .model_id = info.identity});
    if (!m) return Error{m.error()};
    kv = std::move(*m);
  }
  return std::unique_ptr<ModelDrafter>(
      new ModelDrafter(std::move(runner), std::move(kv), std::move(token_of_logit), n_vocab_target, std::move(clock)));
}

ModelDrafter::ModelDrafter(std::unique_ptr<runtime::ModelRunner> runner, std::optional<kv::KvManager> kv,
                           std::vector<int32_t> token_of_logit, int64_t n_vocab_target, std::function<int64_t()> clock)
    : runner_(std::move(runner)),
      kv_(std::move(kv)),
      token_of_logit_(std::move(token_of_logit)),
      n_vocab_target_(n_vocab_target),
      clock_(std::move(clock)) {}

void ModelDrafter::release(int64_t id) {
  if (held_.erase(id)) kv_->seq_free(id);
}

int32_t ModelDrafter::pick(const float* row) const {
  const int64_t n = runner_->info().n_vocab;
  int32_t best = -1;
  float best_v = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = token_of_logit_.empty() ? int32_t(i) : token_of_logit_[size_t(i)];
    if (t >= n_vocab_target_) continue;
    if (best < 0 || row[i] > best_v || (row[i] == best_v && t < best)) best = t, best_v = row[i];
  }
  return best;
}

// Makes room for `tokens` positions of request `id`, evicting the draft KV of the requests that
// drafted least recently (never one of this call's).
bool ModelDrafter::reserve(int64_t id, int32_t tokens, const std::unordered_set<int64_t>& busy) {
  while (!kv_->seq_allocate(id, tokens)) {
    int64_t victim = -1;
    uint64_t oldest = UINT64_MAX;
    for (const auto& [other, h] : held_)
      if (!busy.count(other) && h.last_used < oldest) victim = other, oldest = h.last_used;
    if (victim < 0) return false;
    release(victim);
  }
  return true;
}

bool ModelDrafter::queue_first(DraftJob& j, int32_t k, const std::unordered_set<int64_t>& busy) {
  const int32_t n = int32_t(j.context.size());
  if (!kv_) {
    if (!j.target_blocks || int64_t(j.target_blocks->size()) * runner_->info().block_size < n - 1 + k) return false;
    j.draft.assign(size_t(k), -1);
    pending_.push_back({j.context[size_t(n - 1)], n - 1, j.target_blocks, &j, 0});
    return true;
  }
  auto [it, fresh] = held_.try_emplace(j.id);
  if (fresh && !kv_->seq_admit(j.id, {}, 0, {}, 0)) {
    held_.erase(it);
    return false;
  }
  it->second.last_used = calls_;
  std::vector<int32_t>& held = it->second.tokens;
  // Positions whose KV still holds this context's tokens; the last token is fed again for logits.
  const size_t keep = std::min<size_t>(
      size_t(std::mismatch(held.begin(), held.end(), j.context.begin(), j.context.end()).first - held.begin()),
      size_t(n - 1));
  kv_->seq_truncate(j.id, int32_t(keep));
  held.resize(keep);
  if (!reserve(j.id, n - 1 + k, busy)) return false;
  j.draft.assign(size_t(k), -1);
  const std::vector<int32_t>* blocks = &kv_->seq_blocks(j.id);
  for (int32_t p = int32_t(keep); p < n; ++p)
    pending_.push_back({j.context[size_t(p)], p, blocks, p + 1 == n ? &j : nullptr, 0});
  held.assign(j.context.begin(), j.context.end());
  return true;
}

Status ModelDrafter::propose(std::span<DraftJob> jobs) {
  const runtime::RunnerInfo& info = runner_->info();
  std::unordered_set<int64_t> busy;
  for (const DraftJob& j : jobs) busy.insert(j.id);
  const int64_t start = clock_();
  ++calls_;
  timing_ = {};
  pending_.clear();
  int32_t max_k = 0;
  for (DraftJob& j : jobs) {
    j.draft.clear();
    const int32_t n = int32_t(j.context.size());
    if (j.k <= 0 || n == 0) continue;
    const int32_t k = int32_t(std::min<int64_t>(j.k, info.n_ctx_train - n + 1));  // positions up to n + k - 2
    if (k <= 0 || !queue_first(j, k, busy)) continue;
    max_k = std::max(max_k, k);
  }
  for (const Row& r : pending_) timing_.first_logits += r.job != nullptr;
  timing_.first_catch_up = int32_t(pending_.size()) - timing_.first_logits;
  Status s = flush();
  timing_.first_ns = clock_() - start;
  for (int32_t d = 1; s && d < max_k; ++d) {
    pending_.clear();
    for (DraftJob& j : jobs) {
      if (int32_t(j.draft.size()) <= d || j.draft[size_t(d - 1)] < 0) continue;
      const int32_t n = int32_t(j.context.size());
      const std::vector<int32_t>* blocks = j.target_blocks;
      if (kv_) {
        held_.at(j.id).tokens.push_back(j.draft[size_t(d - 1)]);
        blocks = &kv_->seq_blocks(j.id);
      }
      pending_.push_back({j.draft[size_t(d - 1)], n - 1 + d, blocks, &j, d});
    }
    if (pending_.empty()) continue;
    const int64_t t0 = clock_();
    s = flush();
    if (s) timing_.later.push_back({int32_t(pending_.size()), clock_() - t0});
  }
  for (DraftJob& j : jobs) {
    const auto end = std::find(j.draft.begin(), j.draft.end(), -1);
    j.draft.erase(end, j.draft.end());
    if (!s) release(j.id);  // a failed forward leaves the draft KV undefined
  }
  timing_.total_ns = clock_() - start;
  return s;
}

int32_t ModelDrafter::unseen(int64_t id, std::span<const int32_t> context) const {
  if (!kv_) return 0;
  const int32_t n = int32_t(context.size());
  const auto it = held_.find(id);
  if (it == held_.end()) return std::max(n - 1, 0);
  const std::vector<int32_t>& held = it->second.tokens;
  const size_t same = size_t(std::mismatch(held.begin(), held.end(), context.begin(), context.end()).first - held.begin());
  return std::max(n - 1 - int32_t(same), 0);
}

Status ModelDrafter::flush() {
  const int64_t max_rows = runner_->info().max_batch_tokens;
  const int64_t n_logits = runner_->info().n_vocab;
  for (size_t begin = 0; begin < pending_.size();) {
    const size_t end = std::min(pending_.size(), begin + size_t(max_rows));
    batch_.clear();
    const std::vector<int32_t>* last = nullptr;
    for (size_t r = begin; r < end; ++r) {
      const Row& row = pending_[r];
      if (row.blocks != last) batch_.add_sequence(*(last = row.blocks));  // a request's rows are contiguous
      batch_.add(row.token, row.pos, batch_.n_seqs() - 1, row.job != nullptr);
    }
    auto logits = runner_->forward(batch_);
    if (!logits) return Error{"draft forward failed: " + logits.error()};
    int64_t i = 0;
    for (size_t r = begin; r < end; ++r)
      if (DraftJob* j = pending_[r].job) j->draft[size_t(pending_[r].d)] = pick(*logits + (i++) * n_logits);
    begin = end;
  }
  return {};
}

}  // namespace kvasir::spec
