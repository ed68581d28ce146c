#include "compress/distill_head.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "compress/chunk_pass.h"

namespace kvasir::compress {

Result<TeacherFeatures> teacher_features(const Model& target, std::span<const int32_t> tokens, const FeatureOptions& o) {
  const ModelConfig& c = target.config();
  auto chunks = count_chunks(tokens.size(), o.n_ctx, o.max_chunks, "the text");
  if (!chunks) return Error{chunks.error(), chunks.error_code()};
  auto pass = ChunkPass::create(target, o.n_ctx, o.num_threads);
  if (!pass) return Error{pass.error()};
  TeacherFeatures f{.n_embd = c.n_embd, .n_ctx = o.n_ctx};
  f.hidden.resize(size_t(*chunks * o.n_ctx * c.n_embd));
  for (int64_t ci = 0; ci < *chunks; ++ci) {
    const Batch& batch = (*pass)->load(tokens.subspan(size_t(ci * o.n_ctx), size_t(o.n_ctx)), o.bos, true);
    f.tokens.insert(f.tokens.end(), batch.tokens.begin(), batch.tokens.end());
    if (auto r = (*pass)->forward().forward(batch, (*pass)->kv()); !r) return Error{r.error()};
    std::copy_n((*pass)->forward().hidden(), o.n_ctx * c.n_embd, f.hidden.data() + ci * o.n_ctx * c.n_embd);
    if (o.on_chunk) o.on_chunk(ci + 1, *chunks);
  }
  return f;
}

namespace {

// A batch of examples at draft position k: position p (of chunk c) gives h_{p+k}, x_{p+k+1}, and the
// teacher's logits over the head's tokens from h_{p+k+1}; the text's token x_{p+k+2} for the CE term.
struct ExampleBatch {
  std::vector<float> h, e, teacher, student, dz;
  std::vector<int32_t> target;  // index into the head's tokens of x_{p+k+2}, -1 when not among them
};

// Position indices (chunk * n_ctx + t) that have `depth` next hidden states and a token after them.
std::vector<int64_t> example_positions(const TeacherFeatures& f, int64_t depth) {
  std::vector<int64_t> out;
  for (int64_t c = 0; c < f.chunks(); ++c)
    for (int64_t t = 0; t + depth + 1 < f.n_ctx; ++t) out.push_back(c * f.n_ctx + t);
  return out;
}

void fill(EagleHead& head, const TeacherFeatures& f, std::span<const int64_t> pos, int64_t k, ExampleBatch& b,
          ThreadPool* pool) {
  const int64_t d = f.n_embd, B = int64_t(pos.size()), N = head.n_tokens();
  b.h.resize(size_t(B * d));
  b.e.resize(size_t(B * d));
  b.teacher.resize(size_t(B * N));
  b.student.resize(size_t(B * N));
  b.dz.resize(size_t(B * N));
  b.target.assign(size_t(B), -1);
  std::vector<float> next(size_t(B * d));
  const auto& ids = head.shape().tokens;
  for (int64_t i = 0; i < B; ++i) {
    const int64_t p = pos[size_t(i)] + k;
    std::copy_n(f.hidden.data() + p * d, d, b.h.data() + i * d);
    std::copy_n(f.hidden.data() + (p + 1) * d, d, next.data() + i * d);
    head.embed(f.tokens[size_t(p + 1)], b.e.data() + i * d);
    auto it = std::lower_bound(ids.begin(), ids.end(), f.tokens[size_t(p + 2)]);
    if (it != ids.end() && *it == f.tokens[size_t(p + 2)]) b.target[size_t(i)] = int32_t(it - ids.begin());
  }
  // The teacher over the head's tokens: its own readout of h_{p+1} (the head reads out the same way,
  // with its own norm in front).
  grad::linear(next.data(), head.readout(), B, d, N, b.teacher.data(), pool);
  if (const float cap = head.softcap(); cap > 0)
    for (float& z : b.teacher) z = cap * std::tanh(z / cap);
}

// Drafting feeds the head its own prediction from the second position on. For a fraction of the
// examples (those not at a chunk's start), the input state h_p is replaced by what the head itself
// predicts from (h_{p-1}, x_p) with its current weights (no gradient through that), so that it
// learns to read its own states too.
void feed_own_states(EagleHead& head, const TeacherFeatures& f, std::span<const int64_t> pos, double fraction,
                     std::mt19937_64& rng, ExampleBatch& b, ThreadPool* pool) {
  const int64_t d = f.n_embd;
  std::bernoulli_distribution coin(fraction);
  std::vector<int64_t> which;
  for (size_t i = 0; i < pos.size(); ++i)
    if (pos[i] % f.n_ctx > 0 && coin(rng)) which.push_back(int64_t(i));
  if (which.empty()) return;
  const int64_t R = int64_t(which.size());
  std::vector<float> h(size_t(R * d)), e(size_t(R * d)), z(size_t(R * head.n_tokens()));
  for (int64_t r = 0; r < R; ++r) {
    const int64_t p = pos[size_t(which[size_t(r)])] - 1;
    std::copy_n(f.hidden.data() + p * d, d, h.data() + r * d);
    head.embed(f.tokens[size_t(p + 1)], e.data() + r * d);
  }
  head.forward(h.data(), e.data(), R, z.data(), pool);
  for (int64_t r = 0; r < R; ++r) std::copy_n(head.output_state() + r * d, d, b.h.data() + which[size_t(r)] * d);
}

}  // namespace

HeadEval evaluate_head(EagleHead& head, const TeacherFeatures& f, int64_t max_positions, ThreadPool* pool) {
  std::vector<int64_t> pos = example_positions(f, 2);
  if (max_positions >= 0 && int64_t(pos.size()) > max_positions) {  // evenly spread
    std::vector<int64_t> picked;
    for (int64_t i = 0; i < max_positions; ++i) picked.push_back(pos[size_t(i * int64_t(pos.size()) / max_positions)]);
    pos = std::move(picked);
  }
  HeadEval e;
  ExampleBatch first, second;
  EagleHead::Tape tape;
  const size_t N = size_t(head.n_tokens()), chunk = 256;
  const auto argmax = [&](const std::vector<float>& v, size_t i) {
    return std::max_element(v.begin() + i * N, v.begin() + (i + 1) * N) - (v.begin() + i * N);
  };
  for (size_t at = 0; at < pos.size(); at += chunk) {
    const auto span = std::span<const int64_t>(pos).subspan(at, std::min(chunk, pos.size() - at));
    const int64_t B = int64_t(span.size());
    fill(head, f, span, 0, first, pool);
    head.forward(first.h.data(), first.e.data(), B, first.student.data(), pool, tape);
    fill(head, f, span, 1, second, pool);
    head.forward(tape.o.data(), second.e.data(), B, second.student.data(), pool);
    for (size_t i = 0; i < span.size(); ++i) {
      const auto s = std::span<const float>(first.student).subspan(i * N, N);
      const auto t = std::span<const float>(first.teacher).subspan(i * N, N);
      const auto parts = grad::distill_loss(s, t, {}, std::span<float>(first.dz).subspan(i * N, N));
      e.kl += parts.kl, e.tvd += parts.tvd;
      const bool one = argmax(first.student, i) == argmax(first.teacher, i);
      e.accept += one;
      e.accept2 += one && argmax(second.student, i) == argmax(second.teacher, i);
    }
  }
  e.positions = int64_t(pos.size());
  if (e.positions)
    for (double* v : {&e.kl, &e.tvd, &e.accept, &e.accept2}) *v /= double(e.positions);
  return e;
}

Result<HeadTrainReport> train_head(EagleHead& head, const TeacherFeatures& train, const TeacherFeatures& held_out,
                                   const HeadTrainOptions& o) {
  if (train.n_embd != head.shape().n_embd || held_out.n_embd != head.shape().n_embd)
    return Error{"the features' width is not the head's", ErrorCode::invalid_argument};
  if (o.unroll < 1 || o.unroll > 8) return Error{"the unrolled draft positions must be in [1, 8]", ErrorCode::invalid_argument};
  const std::vector<int64_t> pos = example_positions(train, o.unroll);
  if (pos.empty()) return Error{"no training examples (the text is shorter than one chunk)", ErrorCode::invalid_argument};
  if (o.batch < 1 || o.steps < 1) return Error{"steps and batch must be positive", ErrorCode::invalid_argument};
  ThreadPool pool(o.num_threads > 0 ? o.num_threads : ThreadPool::default_threads());
  HeadTrainReport report;
  report.before = evaluate_head(head, held_out, o.eval_positions, &pool);
  EagleHeadParams grads = zeros_like(head.params()), m = zeros_like(head.params()), v = zeros_like(head.params());
  const grad::AdamW opt{.lr = o.lr, .weight_decay = o.weight_decay};
  std::mt19937_64 rng(o.seed + uint64_t(o.first_step));
  std::uniform_int_distribution<size_t> pick(0, pos.size() - 1);
  std::vector<int64_t> batch_pos(size_t(o.batch));
  std::vector<ExampleBatch> b(size_t(o.unroll));
  std::vector<EagleHead::Tape> tapes(size_t(o.unroll));
  std::vector<float> d_state, d_prev;
  const int64_t N = head.n_tokens(), d = head.shape().n_embd;
  const auto t0 = std::chrono::steady_clock::now();
  double loss_sum = 0, kl_sum = 0;
  int64_t since = 0;
  for (int64_t step = o.first_step; step < o.steps; ++step) {
    for (auto& p : batch_pos) p = pos[pick(rng)];
    // Forward through the draft positions, each fed the one before's output state.
    for (int64_t k = 0; k < o.unroll; ++k) {
      ExampleBatch& bk = b[size_t(k)];
      fill(head, train, batch_pos, k, bk, &pool);
      if (k == 0 && o.self_feed > 0) feed_own_states(head, train, batch_pos, o.self_feed, rng, bk, &pool);
      const float* state = k == 0 ? bk.h.data() : tapes[size_t(k - 1)].o.data();
      head.forward(state, bk.e.data(), o.batch, bk.student.data(), &pool, tapes[size_t(k)]);
      for (int64_t i = 0; i < o.batch; ++i) {
        grad::LossOptions lo = o.loss;
        lo.target = bk.target[size_t(i)];
        if (lo.target < 0) lo.ce_weight = 0;  // the text's token is not one the head can propose
        const auto row = [&](std::vector<float>& v) { return std::span<float>(v).subspan(size_t(i * N), size_t(N)); };
        const auto parts = grad::distill_loss(row(bk.student), row(bk.teacher), lo, row(bk.dz));
        if (k == 0) loss_sum += parts.loss, kl_sum += parts.kl;  // the progress figures stay the first position's
      }
      for (float& g : bk.dz) g /= float(o.batch);  // the mean over the batch
    }
    // Backward from the last position, each passing the gradient on its input state to the one before.
    for (auto g : grads.all()) std::fill(g.begin(), g.end(), 0.f);
    for (int64_t k = o.unroll - 1; k >= 0; --k) {
      d_prev.assign(k > 0 ? size_t(o.batch * d) : 0, 0.f);
      head.backward(b[size_t(k)].dz.data(), grads, &pool, tapes[size_t(k)], d_state.empty() ? nullptr : d_state.data(),
                    k > 0 ? d_prev.data() : nullptr);
      d_state.swap(d_prev);
    }
    d_state.clear();
    const auto gs = grads.all();
    grad::clip_grad_norm(gs, o.clip);
    const double scale = grad::lr_schedule(step, o.steps, o.warmup);
    auto ps = head.params().all(), ms = m.all(), vs = v.all();
    for (size_t k = 0; k < ps.size(); ++k) opt.step(ps[k], gs[k], ms[k], vs[k], step - o.first_step + 1, scale);
    ++since, report.examples += o.batch, ++report.steps;
    const bool last = step + 1 == o.steps, evaluate = last || (o.eval_every > 0 && (step + 1) % o.eval_every == 0);
    if (o.on_progress || evaluate) {
      HeadTrainProgress pr{.step = step + 1, .steps = o.steps, .loss = loss_sum / double(since * o.batch),
                           .kl = kl_sum / double(since * o.batch), .lr = o.lr * scale};
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      pr.examples_per_s = double(report.examples) / std::max(secs, 1e-9);
      if (evaluate) {
        pr.eval = evaluate_head(head, held_out, o.eval_positions, &pool);
        report.curve.push_back(pr);
        loss_sum = kl_sum = 0, since = 0;
      }
      if (o.on_progress) o.on_progress(pr);
    }
    if (o.on_checkpoint && o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0 && !last)
      if (auto s = o.on_checkpoint(step + 1); !s) return Error{s.error(), s.error_code()};
  }
  report.after = report.curve.empty() ? evaluate_head(head, held_out, o.eval_positions, &pool) : *report.curve.back().eval;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace kvasir::compress
