// Quality measures of a model on a text, as llama.cpp's llama-perplexity computes them, so that
// figures compare across tools: the chunking, perplexity with its uncertainty, and the KL
// divergence of a model's next-token distributions from a reference model's (side by side, no
// logits file).
//
// Chunks (llama.cpp's method): the text is tokenized once (BOS first), cut into chunks of n_ctx
// tokens, each chunk's first token replaced by BOS and evaluated on its own; only the second half
// is scored: logits rows n_ctx/2 .. n_ctx-2 predict tokens n_ctx/2+1 .. n_ctx-1.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/kv_transform.h"
#include "model/model.h"

namespace kvasir::eval {

struct ChunkPlan {
  int64_t n_ctx = 0, n_chunks = 0;
  int64_t first = 0;  // first scored logits row of a chunk
  int64_t scored_per_chunk() const { return n_ctx - 1 - first; }
};
ChunkPlan plan_chunks(int64_t n_tokens, int64_t n_ctx);

// log p(target) under softmax(logits), in double.
double log_prob(std::span<const float> logits, int32_t target);

struct PerplexityStats {
  double sum = 0, sum2 = 0;  // of the negative log-likelihoods
  int64_t count = 0;
  void add(double nll) { sum += nll, sum2 += nll * nll, ++count; }
  double ppl() const;
  double ppl_error() const;  // llama.cpp's: ppl times the standard error of the mean NLL
};

// The KL divergence of a model's distributions from a base model's, position by position.
class KlStats {
 public:
  void add(std::span<const float> base_logits, std::span<const float> logits, int32_t target);
  int64_t count() const { return int64_t(kld_.size()); }
  double mean_kld() const;
  double kld_quantile(double q) const;  // q in [0, 1]: 0.5 median, 0.99, 1 max
  double same_top1() const;             // fraction of positions with the same argmax
  double mean_delta_p() const;          // mean of p(target) - p_base(target)
  double rms_delta_p() const;
  const PerplexityStats& base_ppl() const { return base_; }
  const PerplexityStats& ppl() const { return model_; }

 private:
  std::vector<double> kld_;
  int64_t same_ = 0;
  double dp_ = 0, dp2_ = 0;
  PerplexityStats base_, model_;
};


// Evaluation of a model (and, with `base`, its KL divergence from the base) over tokens.
struct EvalOptions {
  int64_t n_ctx = 512;
  int num_threads = 0;
  int32_t bos = -1;  // replaces each chunk's first token when >= 0
  int device = -1;   // CUDA device ordinal for both models; -1: the CPU
  // The model's KV cache and the base's: with one file as both, what a KV type costs.
  DType kv_type = DType::F16, base_kv_type = DType::F16;
  std::vector<DType> kv_layer_types = {};
  bool kv_rotate_k = true;
  std::shared_ptr<const KvTransform> kv_transform = nullptr;  // the model's quantized KV basis
  std::function<void(int64_t chunks_done, int64_t chunks, double ppl_so_far)> on_chunk = {};
};

struct EvalResult {
  ChunkPlan plan;
  PerplexityStats ppl;        // the model's
  std::optional<KlStats> kl;  // with a base model
};

// `tokens`: the whole text, tokenized once. Models must share the vocabulary.
Result<EvalResult> evaluate(const Model& model, const Model* base, std::span<const int32_t> tokens,
                            const EvalOptions& options);

}  // namespace kvasir::eval
