// One chunk of a text at a time through a model's own Forward, with the KV cache and block table
// such a pass needs: what the calibration passes of compress/ share (the layers' distances, a
// teacher's hidden states).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/forward.h"
#include "model/kv_cache.h"

namespace kvasir::compress {

// A token's row of the model's embedding, scaled as Forward embeds it (the input of layer 0).
void embed_token(const Model& model, int32_t token, float* out);

// Whole chunks of n_ctx tokens in n_tokens, at most max_chunks (-1: no bound); an error naming
// `what` (the text's role) when there is none, or when n_ctx is under 16.
Result<int64_t> count_chunks(size_t n_tokens, int64_t n_ctx, int64_t max_chunks, const std::string& what);

class ChunkPass {
 public:
  static Result<std::unique_ptr<ChunkPass>> create(const Model& model, int64_t n_ctx, int num_threads);
  // The chunk as one sequence at positions 0.., its first token replaced by bos when >= 0; no row
  // wants logits, every row its hidden state when `hidden`.
  const Batch& load(std::span<const int32_t> tokens, int32_t bos, bool hidden);
  Forward& forward() { return fwd_; }
  KvCache& kv() { return kv_; }

 private:
  ChunkPass(const Model& model, int64_t n_ctx, int num_threads, KvCache kv);
  Forward fwd_;
  KvCache kv_;
  std::vector<int32_t> table_;
  Batch batch_;
};

}  // namespace kvasir::compress
