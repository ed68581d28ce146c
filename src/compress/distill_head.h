// Distilling an EAGLE-style draft head (eagle_head.h) from its target: the target runs once over
// the training text, keeping each position's final hidden state (d floats; its logits are never
// stored: the head's teacher distribution over its N tokens is recomputed from the next hidden
// state per batch). Each example is (h_t, x_{t+1}) -> the target's distribution at t+1, learned
// with the distillation loss of grad.h (KL at a temperature, optionally with CE on the text's
// token, or TVD), AdamW, clipping and a warmup + cosine schedule; a held-out text measures the
// KL and how often the head's top token is the target's (greedy acceptance of one drafted token,
// among the head's tokens) before, during and after. Trained unrolled (`unroll` > 1), each example
// also runs the positions after it on the head's own states, the loss backpropagated through them.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "compress/eagle_head.h"
#include "compress/grad.h"
#include "core/status.h"
#include "model/model.h"

namespace kvasir::compress {

// The target's final hidden states (after its output norm) over chunks of a text.
struct TeacherFeatures {
  int64_t n_embd = 0, n_ctx = 0;
  std::vector<int32_t> tokens;  // [chunks][n_ctx]
  std::vector<float> hidden;    // [chunks][n_ctx][n_embd]
  int64_t chunks() const { return n_ctx ? int64_t(tokens.size()) / n_ctx : 0; }
};

struct FeatureOptions {
  int64_t n_ctx = 512;
  int64_t max_chunks = -1;  // -1: every whole chunk
  int32_t bos = -1;         // replaces each chunk's first token when >= 0
  int num_threads = 0;
  std::function<void(int64_t chunk, int64_t chunks)> on_chunk = {};
};
Result<TeacherFeatures> teacher_features(const Model& target, std::span<const int32_t> tokens, const FeatureOptions& o);

struct HeadEval {
  double kl = 0, tvd = 0, accept = 0;  // means over the evaluated positions
  // Both of two drafted tokens the target's: the second position fed the first's output state and
  // the text's next token (what greedy drafting at K = 2 keeps whole when the text is the target's).
  double accept2 = 0;
  int64_t positions = 0;
};
// The head against the target on every position of `features` (at most max_positions of them).
HeadEval evaluate_head(EagleHead& head, const TeacherFeatures& features, int64_t max_positions, ThreadPool* pool);

struct HeadTrainProgress {
  int64_t step = 0, steps = 0;
  double loss = 0, kl = 0, lr = 0, examples_per_s = 0;
  std::optional<HeadEval> eval;  // on evaluation steps
};

struct HeadTrainOptions {
  int64_t steps = 2000, batch = 64, warmup = 100;
  int64_t first_step = 0;  // resuming: where the schedule stands
  double lr = 1e-3, weight_decay = 0.0, clip = 1.0;
  grad::LossOptions loss = {};  // target is set per example (the text's token)
  double self_feed = 0.0;       // fraction of examples whose input state is the head's own prediction
  // Draft positions trained per example: position k+1 is fed position k's output state (and the
  // text's token), its loss added with the same weight, the gradient flowing back through the
  // state (what drafting does from the second position on).
  int64_t unroll = 1;
  int64_t eval_every = 200, eval_positions = 4096;
  uint64_t seed = 1;
  int num_threads = 0;
  std::function<void(const HeadTrainProgress&)> on_progress = {};
  std::function<Status(int64_t step)> on_checkpoint = {};  // every checkpoint_every steps
  int64_t checkpoint_every = 0;
};

struct HeadTrainReport {
  HeadEval before, after;
  int64_t steps = 0, examples = 0;
  double seconds = 0;
  std::vector<HeadTrainProgress> curve;  // one per evaluation
};

Result<HeadTrainReport> train_head(EagleHead& head, const TeacherFeatures& train, const TeacherFeatures& held_out,
                                   const HeadTrainOptions& o);

}  // namespace kvasir::compress
