// An EAGLE-style draft head: from the target's final hidden state h_t (after its output norm) and
// the embedding of the token x_{t+1} the target chose there, it predicts the target's next hidden
// state ĥ_{t+1} and reads it out through the target's own output rows for the N most frequent
// tokens (frozen, shared: the head stores only their ids), so it proposes x_{t+2} at a few percent
// of a target step. Its layer is a transformer block's FFN half over the fused input:
//   a = FC · [h_t ; e(x_{t+1})]            FC: [d][2d]
//   ĥ = a + W_down (act(W_gate n) ⊙ W_up n),  n = rms_norm(a) · w_ffn_norm
//   z = softcap(W_N · (rms_norm(ĥ) · w_out_norm))
// (no attention: h_t already summarizes the context; the target's activation, norm epsilon and
// final soft-cap). Forward and backward over a batch of B examples; the parameters train with
// AdamW (grad.h). Saved as a small GGUF (general.architecture "kvasir-eagle-head").
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace kvasir::compress {

struct EagleHeadShape {
  int64_t n_embd = 0, n_ff = 0;
  std::vector<int32_t> tokens;  // the head's vocabulary, ascending target ids
};

// The parameters, flat, in one order (what the optimizer and the file walk).
struct EagleHeadParams {
  std::vector<float> fc, ffn_norm, gate, up, down, out_norm;
  std::vector<std::span<float>> all();
  std::vector<std::span<const float>> all() const;
};

class EagleHead {
 public:
  // A fresh head for `target`: FC maps [h; e] to h (so ĥ starts as h_t: the head first predicts
  // "the same hidden state again"), small random FFN (seeded), norms from the target's output norm.
  static Result<EagleHead> init(const Model& target, int64_t n_ff, std::vector<int32_t> tokens, uint64_t seed);
  // A saved head, checked against the target it drafts for (width, vocabulary, identity).
  static Result<EagleHead> load(const std::string& path, const Model& target);
  Status save(const std::string& path, const std::vector<std::pair<std::string, std::string>>& info = {}) const;

  const EagleHeadShape& shape() const { return shape_; }
  EagleHeadParams& params() { return p_; }
  const EagleHeadParams& params() const { return p_; }
  int64_t n_tokens() const { return int64_t(shape_.tokens.size()); }

  // One forward's activations: what backward() needs. Training unrolled over draft positions
  // keeps one per position.
  struct Tape {
    int64_t B = 0;
    std::vector<float> x, a, n, g, u, m, hhat, o, zpre;
  };

  // The head's logits over its tokens for B examples: h [B][d] (target hidden states, post-norm,
  // or the head's own output_state when drafting further), e [B][d] (embeddings of the next
  // tokens, scaled as the target embeds): z [B][N]. Keeps what backward() needs in `tape` (the
  // head's own one when not given).
  void forward(const float* h, const float* e, int64_t B, float* z, ThreadPool* pool) { forward(h, e, B, z, pool, tape_); }
  void forward(const float* h, const float* e, int64_t B, float* z, ThreadPool* pool, Tape& tape);
  // The next hidden states it predicted in the last forward, [B][d] (pre-norm ĥ).
  const float* predicted() const { return tape_.hhat.data(); }
  // What the head passes to its next position when drafting: rms_norm(ĥ) · w_out_norm, [B][d].
  const float* output_state() const { return tape_.o.data(); }
  // dz [B][N] -> parameter gradients accumulated into `grads` (same layout as params()).
  void backward(const float* dz, int64_t B, EagleHeadParams& grads, ThreadPool* pool) { backward(dz, grads, pool, tape_); }
  // The same for a kept tape; d_state [B][d] (may be null) is a further gradient on the forward's
  // output_state (from the next draft position it fed), and d_h [B][d] (may be null) receives the
  // gradient on the forward's input state h.
  void backward(const float* dz, EagleHeadParams& grads, ThreadPool* pool, const Tape& tape, const float* d_state = nullptr,
                float* d_h = nullptr);

  // The target's rows for the head's tokens and its readout settings (bound at init/load).
  const float* readout() const { return w_n_.data(); }
  float softcap() const { return softcap_; }
  // Embedding of a target token, as the target embeds it.
  void embed(int32_t token, float* out) const;

 private:
  EagleHead(const Model& target, EagleHeadShape shape);
  const Model* target_;
  EagleHeadShape shape_;
  EagleHeadParams p_;
  std::vector<float> w_n_, w_n_t_;  // [N][d] F32 copy of the target's output rows, and [d][N]
  float eps_ = 1e-6f, softcap_ = 0.f;
  bool gelu_ = true;
  Tape tape_;  // the last forward's, when the caller keeps none
};

EagleHeadParams zeros_like(const EagleHeadParams& p);

}  // namespace kvasir::compress
