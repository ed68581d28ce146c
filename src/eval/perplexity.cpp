#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>

#include "backends/runner_factory.h"

namespace kvasir::eval {
namespace {

// max and log(sum exp(x - max)) of a row, in double.
std::pair<double, double> log_normalizer(std::span<const float> logits) {
  double mx = -INFINITY;
  for (float x : logits) mx = std::max(mx, double(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - mx);
  return {mx, std::log(sum)};
}

int32_t argmax(std::span<const float> logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

ChunkPlan plan_chunks(int64_t n_tokens, int64_t n_ctx) {
  ChunkPlan p;
  p.n_ctx = n_ctx;
  p.n_chunks = n_ctx >= 4 ? n_tokens / n_ctx : 0;
  p.first = n_ctx / 2;
  return p;
}

double log_prob(std::span<const float> logits, int32_t target) {
  const auto [mx, lse] = log_normalizer(logits);
  return double(logits[size_t(target)]) - mx - lse;
}

double PerplexityStats::ppl() const { return count ? std::exp(sum / double(count)) : 0.0; }

double PerplexityStats::ppl_error() const {
  if (count < 2) return 0;
  const double mean = sum / double(count), mean2 = sum2 / double(count);
  const double var = std::max(0.0, mean2 - mean * mean);
  return ppl() * std::sqrt(var / double(count - 1));
}

void KlStats::add(std::span<const float> base, std::span<const float> logits, int32_t target) {
  const auto [bmx, blse] = log_normalizer(base);
  const auto [mmx, mlse] = log_normalizer(logits);
  double kld = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    const double lb = double(base[i]) - bmx - blse, lm = double(logits[i]) - mmx - mlse;
    kld += std::exp(lb) * (lb - lm);
  }
  kld_.push_back(std::max(kld, 0.0));  // rounding can leave a tiny negative for equal rows
  same_ += argmax(base) == argmax(logits);
  const double lpb = double(base[size_t(target)]) - bmx - blse, lpm = double(logits[size_t(target)]) - mmx - mlse;
  const double dp = std::exp(lpm) - std::exp(lpb);
  dp_ += dp, dp2_ += dp * dp;
  base_.add(-lpb);
  model_.add(-lpm);
}

double KlStats::mean_kld() const {
  double s = 0;
  for (double k : kld_) s += k;
  return kld_.empty() ? 0 : s / double(kld_.size());
}

double KlStats::kld_quantile(double q) const {
  if (kld_.empty()) return 0;
  std::vector<double> v = kld_;
  const size_t i = std::min(v.size() - 1, size_t(q * double(v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + ptrdiff_t(i), v.end());
  return v[i];
}

double KlStats::same_top1() const { return kld_.empty() ? 0 : double(same_) / double(kld_.size()); }
double KlStats::mean_delta_p() const { return kld_.empty() ? 0 : dp_ / double(kld_.size()); }
double KlStats::rms_delta_p() const { return kld_.empty() ? 0 : std::sqrt(dp2_ / double(kld_.size())); }


Result<EvalResult> evaluate(const Model& model, const Model* base, std::span<const int32_t> tokens,
                            const EvalOptions& o) {
  EvalResult r;
  r.plan = plan_chunks(int64_t(tokens.size()), o.n_ctx);
  if (r.plan.n_chunks == 0)
    return Error{"the text has " + std::to_string(tokens.size()) + " tokens: fewer than one chunk of " +
                     std::to_string(o.n_ctx) + " (use a longer text or a smaller --ctx)",
                 ErrorCode::invalid_argument};
  const int64_t n_vocab = model.config().n_vocab;
  if (base && base->config().n_vocab != n_vocab)
    return Error{"the base model's vocabulary differs", ErrorCode::invalid_argument};
  for (int32_t t : tokens)
    if (t < 0 || t >= n_vocab) return Error{"token id outside the vocabulary", ErrorCode::invalid_argument};
  const runtime::SessionOptions so{.n_ctx = o.n_ctx, .max_batch_tokens = o.n_ctx, .n_threads = o.num_threads,
                                   .device = o.device};
  runtime::SessionOptions model_so = so;
  model_so.kv = {.type = o.kv_type, .layer_types = o.kv_layer_types, .rotate_k = o.kv_rotate_k, .transform = o.kv_transform};
  auto session = backends::create_session(model, model_so);
  if (!session) return Error{session.error(), session.error_code()};
  std::unique_ptr<runtime::Session> base_session;
  if (base) {
    runtime::SessionOptions base_so = so;
    base_so.kv.type = o.base_kv_type;
    auto bs = backends::create_session(*base, base_so);
    if (!bs) return Error{bs.error()};
    base_session = std::move(*bs);
    r.kl.emplace();
  }
  const int64_t first = r.plan.first, n_ctx = o.n_ctx;
  std::vector<int32_t> chunk(static_cast<size_t>(n_ctx), 0);
  std::vector<float> base_rows(base ? size_t((n_ctx - first) * n_vocab) : 0);
  for (int64_t c = 0; c < r.plan.n_chunks; ++c) {
    std::copy_n(tokens.begin() + c * n_ctx, n_ctx, chunk.begin());
    if (o.bos >= 0) chunk[0] = o.bos;
    if (base_session) {
      base_session->reset();
      auto keep = [&](int64_t i, const float* l) {
        if (i >= first) std::copy_n(l, n_vocab, base_rows.begin() + (i - first) * n_vocab);
      };
      if (auto s = base_session->eval(chunk, true, keep); !s) return Error{s.error()};
    }
    (*session)->reset();
    auto score = [&](int64_t i, const float* l) {
      if (i < first || i >= n_ctx - 1) return;
      const int32_t target = chunk[size_t(i + 1)];
      const std::span<const float> row(l, size_t(n_vocab));
      r.ppl.add(-log_prob(row, target));
      if (r.kl) r.kl->add({base_rows.data() + (i - first) * n_vocab, size_t(n_vocab)}, row, target);
    };
    if (auto s = (*session)->eval(chunk, true, score); !s) return Error{s.error()};
    if (o.on_chunk) o.on_chunk(c + 1, r.plan.n_chunks, r.ppl.ppl());
  }
  return r;
}

}  // namespace kvasir::eval
