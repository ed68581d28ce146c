// KV held outside any request: a prefill instance pins a finished prompt's blocks while it ships
// them, a decode instance reserves blocks for KV it receives and commits them to its prefix cache.
// Both are KvManager sequences under hold ids, so the pool's accounting covers them.
#include <string>

#include "sched/scheduler.h"

namespace kvasir::sched {
namespace {

// The tokens of `tokens`' full blocks, and one more: a prefix hit stops a token short of the end,
// so the extra token lets it cover every full block (block hashes see only their own tokens).
std::vector<int32_t> full_blocks_plus_one(std::span<const int32_t> tokens, int32_t block_size) {
  const size_t full = tokens.size() / size_t(block_size) * size_t(block_size);
  std::vector<int32_t> t(tokens.begin(), tokens.begin() + ptrdiff_t(full));
  t.push_back(0);
  return t;
}

}  // namespace

Result<std::vector<int32_t>> Scheduler::pin_prefix(int64_t hold_id, std::span<const int32_t> tokens,
                                                   std::string_view salt) {
  if (hold_id >= 0 || holds_.count(hold_id) || kv_.seq_exists(hold_id))
    return Error{"KV hold ids are negative and unique", ErrorCode::invalid_argument};
  const kv::PrefixHit hit = kv_.find_prefix(full_blocks_plus_one(tokens, kv_.block_size()), salt);
  if (!kv_.seq_admit(hold_id, hit, 0, salt, 0)) return Error{"cannot pin the prefix", ErrorCode::internal};
  holds_[hold_id] = std::string(salt);
  return kv_.seq_blocks(hold_id);
}

Result<Scheduler::KvReservation> Scheduler::reserve_prefix(int64_t hold_id, std::span<const int32_t> tokens,
                                                           std::string_view salt) {
  if (hold_id >= 0 || holds_.count(hold_id) || kv_.seq_exists(hold_id))
    return Error{"KV hold ids are negative and unique", ErrorCode::invalid_argument};
  const std::vector<int32_t> probe = full_blocks_plus_one(tokens, kv_.block_size());
  const int32_t n_full = int32_t(probe.size()) - 1;
  const kv::PrefixHit hit = kv_.find_prefix(probe, salt);
  if (!kv_.seq_admit(hold_id, hit, n_full - hit.num_tokens, salt, 0))
    return Error{"no KV blocks free for " + std::to_string(n_full - hit.num_tokens) + " tokens", ErrorCode::unavailable};
  holds_[hold_id] = std::string(salt);
  return KvReservation{kv_.seq_blocks(hold_id), int32_t(hit.blocks.size())};
}

Status Scheduler::commit_reserved(int64_t hold_id, std::span<const int32_t> tokens) {
  if (!holds_.count(hold_id)) return Error{"no such KV hold", ErrorCode::invalid_argument};
  const int32_t n_full = int32_t(tokens.size()) / kv_.block_size() * kv_.block_size();
  if (kv_.blocks_for(n_full) != int32_t(kv_.seq_blocks(hold_id).size()))
    return Error{"the tokens do not match the reservation", ErrorCode::invalid_argument};
  kv_.seq_commit(hold_id, tokens.first(size_t(n_full)), n_full);
  return {};
}

void Scheduler::release_kv(int64_t hold_id) {
  if (holds_.erase(hold_id)) kv_.seq_free(hold_id);
}

}  // namespace kvasir::sched
