// One sequence through a runner (a batch of one over the runner's blocks, in order): what `run`,
// `logits`, `bench`, perplexity, the importance matrix and the KV calibration drive. The serving
// engine schedules many sequences over the same seam.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/batch.h"
#include "runtime/model_runner.h"

namespace kvasir::runtime {

// A session's runner: its context in tokens becomes whole KV blocks.
struct SessionOptions {
  int64_t n_ctx = 4096;            // tokens of context (rounded up to whole blocks)
  int64_t max_batch_tokens = 512;  // prefill chunk size
  int n_threads = 0;               // the CPU runner's; 0: physical cores
  int device = -1;                 // CUDA device ordinal; -1: the CPU
  KvOptions kv = {};               // type, rotation, basis, block size (the context sets the block count)
  RunnerOptions runner_options() const;
};

class Session {
 public:
  // Over any runner whose KV holds n_ctx tokens (0: as many as it holds).
  static Result<std::unique_ptr<Session>> create(std::unique_ptr<ModelRunner> runner, int64_t n_ctx = 0);

  // Appends tokens to the sequence in chunks. on_logits(i, logits) is called for every token
  // when all_logits, else only for the last one. Errors leave the sequence unchanged in length.
  using LogitsSink = std::function<void(int64_t index, const float* logits)>;
  Status eval(std::span<const int32_t> tokens, bool all_logits, const LogitsSink& on_logits);

  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return n_ctx_; }
  void reset() { n_past_ = 0; }
  // Back to the first n tokens (their K/V stay; the positions beyond are rewritten by the next eval).
  void truncate(int64_t n) { n_past_ = std::min(n_past_, std::max<int64_t>(n, 0)); }
  ModelRunner& runner() { return *runner_; }

 private:
  Session(std::unique_ptr<ModelRunner> runner, int64_t n_ctx);
  std::unique_ptr<ModelRunner> runner_;
  int64_t n_ctx_;
  std::vector<int32_t> block_table_;
  Batch batch_;
  int64_t n_past_ = 0;
};

}  // namespace kvasir::runtime
