// One sequence evaluated through the batched forward pass (a batch of one): what `run` and
// `logits` need. The serving engine schedules many sequences over the same Forward and KvCache.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace kvasir {

struct SessionOptions {
  int64_t n_ctx = 4096;           // tokens of context (rounded up to whole blocks)
  int64_t max_batch_tokens = 512; // prefill chunk size
  int num_threads = 0;
  DType kv_type = DType::F16;
  int64_t block_size = 16;
  std::vector<DType> kv_layer_types = {};  // per layer; empty: kv_type everywhere
  bool kv_rotate_k = true;
  std::shared_ptr<const KvTransform> kv_transform = nullptr;  // quantized KV's basis (KV calibration)
};

class Session {
 public:
  static Result<std::unique_ptr<Session>> create(const Model& model, const SessionOptions& options);

  // Appends tokens to the sequence in chunks. on_logits(i, logits) is called for every token
  // when all_logits, else only for the last one. Errors leave the sequence unchanged in length.
  using LogitsSink = std::function<void(int64_t index, const float* logits)>;
  Status eval(std::span<const int32_t> tokens, bool all_logits, const LogitsSink& on_logits);

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return n_ctx_; }
  void reset() { n_past_ = 0; }
  // Back to the first n tokens (their K/V stay; the positions beyond are rewritten by the next eval).
  void truncate(int64_t n) { n_past_ = std::min(n_past_, std::max<int64_t>(n, 0)); }
  Forward& forward() { return *forward_; }

 private:
  Session(const Model& model, const SessionOptions& options, KvCache kv);
  const Model& model_;
  int64_t n_ctx_;
  std::unique_ptr<Forward> forward_;
  KvCache kv_;
  std::vector<int32_t> block_table_;
  Batch batch_;
  int64_t n_past_ = 0;
};

}  // namespace kvasir
