// A ragged batch: rows (tokens) from several sequences, prefill chunks and single decode tokens
// mixed. Each row names its sequence; each sequence has a block table mapping logical KV blocks
// to physical blocks of the KvCache, held by value in one flat array (CSR): a batch is plain data
// that can be copied, recorded or sent to another device without pointers into the scheduler.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace kvasir {

struct Batch {
  std::vector<int32_t> tokens;       // [T]
  std::vector<int32_t> positions;    // [T] position of the token in its sequence
  std::vector<int32_t> seq_index;    // [T] the row's sequence (its block table: blocks_of)
  std::vector<uint8_t> want_logits;  // [T] 1 when this row's logits are returned
  // [T] 1 when this row's final hidden state (after the output norm, before the output head) is
  // returned: what embeddings pool. Empty: no row's is.
  std::vector<uint8_t> want_hidden;
  // Per sequence s: physical block ids covering positions [0, max position of its rows], at
  // block_ids[block_start[s] .. block_start[s + 1]).
  std::vector<int32_t> block_ids;
  std::vector<int32_t> block_start{0};
  // Per sequence: the runner's LoRA adapter slot its rows go through, -1 for none. Empty: no
  // sequence has one.
  std::vector<int32_t> seq_adapter;

  // Appends a sequence's block table; returns the sequence's index (what add() takes).
  int32_t add_sequence(std::span<const int32_t> blocks, int32_t adapter = -1) {
    block_ids.insert(block_ids.end(), blocks.begin(), blocks.end());
    block_start.push_back(int32_t(block_ids.size()));
    if (adapter >= 0 && seq_adapter.empty()) seq_adapter.assign(size_t(n_seqs() - 1), -1);
    if (adapter >= 0 || !seq_adapter.empty()) seq_adapter.push_back(adapter);
    return n_seqs() - 1;
  }
  int32_t adapter_of(int32_t seq) const { return seq_adapter.empty() ? -1 : seq_adapter[size_t(seq)]; }
  int32_t n_seqs() const { return int32_t(block_start.size()) - 1; }
  std::span<const int32_t> blocks_of(int32_t seq) const {
    return {block_ids.data() + block_start[size_t(seq)], size_t(block_start[size_t(seq) + 1] - block_start[size_t(seq)])};
  }

  void add(int32_t token, int32_t pos, int32_t seq, bool logits, bool hidden = false) {
    if (hidden && want_hidden.size() < tokens.size()) want_hidden.resize(tokens.size(), 0);
    tokens.push_back(token);
    positions.push_back(pos);
    seq_index.push_back(seq);
    want_logits.push_back(logits ? 1 : 0);
    if (hidden || !want_hidden.empty()) want_hidden.push_back(hidden ? 1 : 0);
  }
  bool wants_hidden(int64_t row) const { return size_t(row) < want_hidden.size() && want_hidden[size_t(row)]; }
  int64_t size() const { return int64_t(tokens.size()); }
  int64_t num_logit_rows() const {
    int64_t n = 0;
    for (auto w : want_logits) n += w;
    return n;
  }
  void clear() {
    tokens.clear();
    positions.clear();
    seq_index.clear();
    want_logits.clear();
    want_hidden.clear();
    block_ids.clear();
    block_start.assign(1, 0);
    seq_adapter.clear();
  }
};

// What a runner takes: rows per forward, the vocabulary, and its KV storage's geometry.
struct BatchLimits {
  int64_t max_tokens = 0;
  int64_t n_vocab = 0;
  int64_t block_size = 16;
  int64_t num_blocks = 0;
  int64_t num_adapter_slots = 0;  // LoRA slots: a sequence's adapter is -1 or below this
};

// Every runner's precondition, checked the same way: 0 < rows <= max_tokens, arrays of one
// length, token ids in the vocabulary, each row's block table covering its position with block
// ids below num_blocks.
Status validate_batch(const Batch& batch, const BatchLimits& limits);

}  // namespace kvasir
