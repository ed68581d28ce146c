#include "spec/eagle_proposer.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "compress/chunk_pass.h"
#include "compress/eagle_head.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/quant/quant.h"

namespace kvasir::spec {
namespace {

// One weight matrix as the kernels take it, and repacked into the kernels' panels where its type
// has them (the decode path of the target's own matrices; bitwise the same products).
struct Weight {
  DType type = DType::F16;
  std::vector<uint8_t> bytes;
  int64_t n_in = 0, n_out = 0;
  kernels::PackedMatrix packed;

  void pack() {
    packed = kernels::pack_matrix_alloc(type, n_in, n_out);
    if (!packed.empty()) kernels::pack_panels(packed, bytes.data(), 0, (n_out + 7) / 8);
  }
};

// Q8_0 where the rows are whole blocks (half F16's bytes: the head is read every draft position),
// F16 otherwise.
Weight to_weight(std::span<const float> w, int64_t n_in, int64_t n_out) {
  const DType t = n_in % 32 == 0 ? DType::Q8_0 : DType::F16;
  Weight m{t, std::vector<uint8_t>(size_t(n_out) * row_bytes(t, n_in)), n_in, n_out};
  for (int64_t r = 0; r < n_out; ++r)
    kernels::quant_traits(t)->quantize_row(w.data() + r * n_in, m.bytes.data() + size_t(r) * row_bytes(t, n_in), n_in);
  m.pack();
  return m;
}

// The readout: the target's output rows for the head's tokens, requantized to Q4_0 where the rows
// are whole blocks. It is two thirds of the bytes a draft position reads (Gemma 3 270M's 8,192
// rows: 5.6 MB as the file's Q8_0, 2.9 as Q4_0), and the coarser rows changed no draft that
// mattered: 315 drafts kept of 480 against 314 (four free-form prompts, greedy, three drafts a
// step), a head position 0.22 -> 0.15 ms (docs/PERFORMANCE.md, session 36).
Weight readout_weight(const Matrix& out, std::span<const int32_t> tokens) {
  const int64_t d = out.n_in, n = int64_t(tokens.size());
  const size_t rb = row_bytes(out.type, d);
  const auto* file = static_cast<const uint8_t*>(out.data);
  if (d % 32 != 0) {  // the file's bytes as they are
    Weight m{out.type, std::vector<uint8_t>(rb * size_t(n)), d, n};
    for (int64_t i = 0; i < n; ++i) std::copy_n(file + size_t(tokens[size_t(i)]) * rb, rb, m.bytes.data() + size_t(i) * rb);
    m.pack();
    return m;
  }
  const DType t = DType::Q4_0;
  Weight m{t, std::vector<uint8_t>(size_t(n) * row_bytes(t, d)), d, n};
  std::vector<float> row(static_cast<size_t>(d));
  for (int64_t i = 0; i < n; ++i) {
    kernels::quant_traits(out.type)->dequantize_row(file + size_t(tokens[size_t(i)]) * rb, row.data(), d);
    kernels::quant_traits(t)->quantize_row(row.data(), m.bytes.data() + size_t(i) * row_bytes(t, d), d);
  }
  m.pack();
  return m;
}

class EagleProposer final : public Proposer {
 public:
  EagleProposer(const Model& target, compress::EagleHead head, std::shared_ptr<ThreadPool> pool,
                std::function<int64_t()> clock, double min_confidence)
      : target_(target), pool_(std::move(pool)), clock_(std::move(clock)), tokens_(head.shape().tokens),
        min_confidence_(min_confidence) {
    const ModelConfig& c = target.config();
    softcap_ = c.final_logit_softcap;
    d_ = c.n_embd, f_ = head.shape().n_ff;
    eps_ = c.norm_eps;
    gelu_ = c.ffn_act == FfnAct::GeluTanh;
    const auto& p = head.params();
    fc_ = to_weight(p.fc, 2 * d_, d_);
    gate_ = to_weight(p.gate, d_, f_);
    up_ = to_weight(p.up, d_, f_);
    down_ = to_weight(p.down, f_, d_);
    ffn_norm_ = p.ffn_norm;
    out_norm_ = p.out_norm;
    readout_ = readout_weight(target.weights().output, tokens_);
    // One forward now: the first one the controller times would otherwise include the pages and
    // caches touched for the first time, and price every later draft by it.
    std::vector<float> h(size_t(d_), 0.f), e(size_t(d_), 0.f), next(size_t(d_), 0.f);
    int32_t token = 0;
    float confidence = 0;
    forward(h.data(), e.data(), 1, &token, &confidence, next.data());
  }

  // The engine asks for scored drafts of every decoding request at once (fill); one request's
  // alone, through the same path.
  std::vector<int32_t> propose(int64_t id, std::span<const int32_t> context, int32_t max_k) override {
    DraftJob job{.id = id, .context = context, .k = max_k};
    if (!fill(std::span<DraftJob>(&job, 1))) return {};
    return job.draft;
  }
  bool scores_drafts() const override { return true; }
  bool wants_hidden() const override { return true; }
  void observe_hidden(int64_t id, std::span<const float> h, size_t context_len) override {
    State& s = state_[id];
    s.h.assign(h.begin(), h.end());
    s.context_len = context_len;
  }
  void release(int64_t id) override { state_.erase(id); }
  const DraftCostModel* cost() const override { return &cost_; }
  int64_t last_fill_ns() const override { return last_fill_ns_; }

  Status fill(std::span<DraftJob> jobs) override {
    const int64_t t0 = clock_();
    std::vector<DraftJob*> active;
    std::vector<double> sure;  // per active job: the head's confidence in its drafts so far
    std::vector<float> h, e;
    for (DraftJob& j : jobs) {
      j.draft.clear();
      j.confidence.clear();
      auto it = state_.find(j.id);
      if (j.k <= 0 || it == state_.end() || it->second.context_len != j.context.size()) continue;
      active.push_back(&j);
      sure.push_back(1.0);
      h.insert(h.end(), it->second.h.begin(), it->second.h.end());
      e.resize(h.size());
      embed(j.context.back(), e.data() + e.size() - size_t(d_));
    }
    for (int32_t pos = 0; !active.empty(); ++pos) {
      const int64_t start = clock_();
      const int64_t R = int64_t(active.size());
      std::vector<int32_t> picked(static_cast<size_t>(R));
      std::vector<float> confidence(static_cast<size_t>(R)), next(size_t(R * d_));
      forward(h.data(), e.data(), R, picked.data(), confidence.data(), next.data());
      std::vector<DraftJob*> still;
      std::vector<double> sure2;
      std::vector<float> h2, e2;
      for (int64_t r = 0; r < R; ++r) {
        DraftJob& j = *active[size_t(r)];
        // Drafts whose chance of being kept (the product of the head's probabilities so far) fell
        // below the floor would rarely pay for their verify rows: the request's drafting ends
        // there. Its first draft is always offered: whether it drafts at all is the controller's
        // call, priced by that draft's probability.
        const double s = sure[size_t(r)] * confidence[size_t(r)];
        if (pos > 0 && s < min_confidence_) continue;
        j.draft.push_back(picked[size_t(r)]);
        j.confidence.push_back(confidence[size_t(r)]);
        if (int32_t(j.draft.size()) >= j.k) continue;
        still.push_back(&j);
        sure2.push_back(s);
        h2.insert(h2.end(), next.begin() + r * d_, next.begin() + (r + 1) * d_);
        e2.resize(h2.size());
        embed(picked[size_t(r)], e2.data() + e2.size() - size_t(d_));
      }
      const double ns = double(clock_() - start);
      if (pos == 0) cost_.observe_first(int32_t(R), 0, ns);
      else cost_.observe_forward(int32_t(R), ns);
      active = std::move(still), sure = std::move(sure2), h = std::move(h2), e = std::move(e2);
    }
    last_fill_ns_ = clock_() - t0;
    return {};
  }

 private:
  struct State {
    std::vector<float> h;
    size_t context_len = 0;
  };

  void embed(int32_t token, float* out) const { compress::embed_token(target_, token, out); }

  // y[R][w.n_out] = x[R][w.n_in] · Wᵀ, output columns split over the pool.
  void linear(const Weight& w, const float* x, int64_t R, float* y) {
    const DType vt = kernels::quant_traits(w.type)->vec_dot_type;
    act_.resize(size_t(R) * row_bytes(vt, w.n_in));
    kernels::quantize_activations(vt, x, R, w.n_in, act_.data());
    const bool packed = !w.packed.empty() && kernels::packed_pays(w.packed, R);
    pool_->parallel_for(w.n_out, 64, [&](int64_t b, int64_t e, int) {
      if (packed) kernels::matmul_rows_packed(w.packed, b, e, act_.data(), R, y, w.n_out);
      else kernels::matmul_rows(w.type, w.bytes.data(), w.n_in, b, e, act_.data(), R, y, w.n_out);
    });
  }

  // One head position for R rows: the picked token ids, the head's probability for each (its
  // softmax over its tokens) and the predicted next hidden states.
  void forward(const float* h, const float* e, int64_t R, int32_t* picked, float* confidence, float* next) {
    std::vector<float> x(size_t(R * 2 * d_)), a(size_t(R * d_)), n(size_t(R * d_)), g(size_t(R * f_)), u(size_t(R * f_)),
        m(size_t(R * f_)), y(size_t(R * d_)), z(size_t(R) * tokens_.size());
    for (int64_t r = 0; r < R; ++r) {
      std::copy_n(h + r * d_, d_, x.data() + r * 2 * d_);
      std::copy_n(e + r * d_, d_, x.data() + r * 2 * d_ + d_);
    }
    linear(fc_, x.data(), R, a.data());
    for (int64_t r = 0; r < R; ++r) kernels::rms_norm(a.data() + r * d_, ffn_norm_.data(), d_, eps_, n.data() + r * d_);
    linear(gate_, n.data(), R, g.data());
    linear(up_, n.data(), R, u.data());
    (gelu_ ? kernels::gelu_tanh_mul : kernels::silu_mul)(g.data(), u.data(), R * f_, m.data());
    linear(down_, m.data(), R, y.data());
    for (int64_t i = 0; i < R * d_; ++i) y[size_t(i)] += a[size_t(i)];
    for (int64_t r = 0; r < R; ++r) kernels::rms_norm(y.data() + r * d_, out_norm_.data(), d_, eps_, next + r * d_);
    linear(readout_, next, R, z.data());  // the soft-cap keeps the order: the argmax is taken before it
    const size_t N = tokens_.size();
    for (int64_t r = 0; r < R; ++r) {
      float* row = z.data() + size_t(r) * N;
      const size_t best = size_t(std::max_element(row, row + N) - row);
      picked[r] = tokens_[best];
      if (softcap_ > 0) kernels::softcap_inplace(row, int64_t(N), softcap_);  // monotone: best stays the max
      confidence[r] = float(1.0 / kernels::exp_sum(row, int64_t(N), row[best]));
    }
  }

  const Model& target_;
  std::shared_ptr<ThreadPool> pool_;
  std::function<int64_t()> clock_;
  std::vector<int32_t> tokens_;
  double min_confidence_ = 0;
  float softcap_ = 0;
  int64_t d_ = 0, f_ = 0;
  float eps_ = 1e-6f;
  bool gelu_ = true;
  Weight fc_, gate_, up_, down_, readout_;
  std::vector<float> ffn_norm_, out_norm_;
  std::vector<uint8_t> act_;
  std::unordered_map<int64_t, State> state_;
  DraftCostModel cost_;
  int64_t last_fill_ns_ = 0;
};

}  // namespace

Result<std::unique_ptr<Proposer>> eagle_proposer(const Model& target, const std::string& head_file,
                                                 std::shared_ptr<ThreadPool> pool, std::function<int64_t()> clock,
                                                 double min_confidence) {
  auto head = compress::EagleHead::load(head_file, target);
  if (!head) return Error{"--draft-head-file: " + head.error(), head.error_code()};
  const Matrix& out = target.weights().output;
  if (!kernels::quant_traits(out.type) || target.config().n_embd % dtype_info(kernels::quant_traits(out.type)->vec_dot_type).block_size)
    return Error{"--draft-head-file: the target's output rows cannot be read out by the head", ErrorCode::invalid_argument};
  if (!pool) pool = std::make_shared<ThreadPool>(ThreadPool::default_threads());
  return std::unique_ptr<Proposer>(std::make_unique<EagleProposer>(target, std::move(*head), std::move(pool), std::move(clock), min_confidence));
}

}  // namespace kvasir::spec
