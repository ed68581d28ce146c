#include "model/batch.h"

#include <string>

namespace kvasir {

Status validate_batch(const Batch& b, const BatchLimits& l) {
  const int64_t T = b.size();
  if (T <= 0 || T > l.max_tokens)
    return Error{"batch of " + std::to_string(T) + " tokens (1.." + std::to_string(l.max_tokens) + " allowed)"};
  if (int64_t(b.positions.size()) != T || int64_t(b.seq_index.size()) != T || int64_t(b.want_logits.size()) != T ||
      (!b.want_hidden.empty() && int64_t(b.want_hidden.size()) != T))
    return Error{"batch arrays have different lengths"};
  if (l.block_size > 256) return Error{"KV block size above 256 is not supported"};
  if (b.block_start.empty() || b.block_start[0] != 0 || size_t(b.block_start.back()) != b.block_ids.size())
    return Error{"batch block tables are malformed"};
  for (size_t s = 1; s < b.block_start.size(); ++s)
    if (b.block_start[s] < b.block_start[s - 1]) return Error{"batch block tables are malformed"};
  if (!b.seq_adapter.empty() && int64_t(b.seq_adapter.size()) != b.n_seqs()) return Error{"batch adapter slots are malformed"};
  for (int32_t a : b.seq_adapter)
    if (a < -1 || a >= l.num_adapter_slots)
      return Error{"batch names LoRA slot " + std::to_string(a) + " (" + std::to_string(l.num_adapter_slots) + " slots)"};
  for (int64_t t = 0; t < T; ++t) {
    if (b.tokens[t] < 0 || b.tokens[t] >= l.n_vocab)
      return Error{"token id " + std::to_string(b.tokens[t]) + " is outside the vocabulary (" + std::to_string(l.n_vocab) + ")"};
    const int32_t s = b.seq_index[t];
    if (s < 0 || s >= b.n_seqs()) return Error{"batch row " + std::to_string(t) + " has no block table"};
    const std::span<const int32_t> table = b.blocks_of(s);
    const int64_t pos = b.positions[t];
    if (pos < 0 || pos / l.block_size >= int64_t(table.size()))
      return Error{"position " + std::to_string(pos) + " is not covered by its block table"};
    for (int64_t blk = 0; blk <= pos / l.block_size; ++blk)
      if (table[size_t(blk)] < 0 || table[size_t(blk)] >= l.num_blocks) return Error{"block id out of range"};
  }
  return {};
}

}  // namespace kvasir
