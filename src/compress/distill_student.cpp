#include "compress/distill_student.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "format/gguf.h"
#include "format/mapped_file.h"
#include "kernels/quant/quant.h"

namespace kvasir::compress {
namespace {

// The shared output matrix in F32, row-major [V][d], and its transpose for the backward.
struct Readout {
  int64_t d = 0, V = 0;
  float softcap = 0;
  std::vector<float> w = {}, w_t = {};
};

Result<Readout> readout_of(const Model& m) {
  const Matrix& out = m.weights().output;
  const auto* tr = kernels::quant_traits(out.type);
  if (!tr || !out.data) return Error{"the student's output matrix cannot be read", ErrorCode::invalid_argument};
  Readout r{.d = out.n_in, .V = out.n_out, .softcap = m.config().final_logit_softcap};
  r.w.resize(size_t(r.V * r.d));
  const size_t rb = row_bytes(out.type, r.d);
  for (int64_t v = 0; v < r.V; ++v)
    tr->dequantize_row(static_cast<const uint8_t*>(out.data) + size_t(v) * rb, r.w.data() + v * r.d, r.d);
  r.w_t.resize(r.w.size());
  for (int64_t v = 0; v < r.V; ++v)
    for (int64_t j = 0; j < r.d; ++j) r.w_t[size_t(j * r.V + v)] = r.w[size_t(v * r.d + j)];
  return r;
}

// Position indices (chunk * n_ctx + t) with a next token in the chunk (the CE term's target).
std::vector<int64_t> positions_of(const TeacherFeatures& f) {
  std::vector<int64_t> out;
  for (int64_t c = 0; c < f.chunks(); ++c)
    for (int64_t t = 0; t + 1 < f.n_ctx; ++t) out.push_back(c * f.n_ctx + t);
  return out;
}

struct AdapterBatch {
  std::vector<float> s, t, u, zs, zt, dz, du;
  std::vector<int32_t> target;
};

void softcap_rows(std::vector<float>& z, float cap) {
  if (cap > 0)
    for (float& x : z) x = cap * std::tanh(x / cap);
}

// The student's and the teacher's logits for the positions; u = n + A·n kept for the backward.
void forward(const Readout& r, std::span<const float> adapter, const TeacherFeatures& teacher, const TeacherFeatures& student,
             std::span<const int64_t> pos, AdapterBatch& b, ThreadPool* pool) {
  const int64_t d = r.d, B = int64_t(pos.size());
  b.s.resize(size_t(B * d)), b.t.resize(size_t(B * d)), b.u.resize(size_t(B * d));
  b.target.resize(size_t(B));
  for (int64_t i = 0; i < B; ++i) {
    const int64_t p = pos[size_t(i)];
    std::copy_n(student.hidden.data() + p * d, d, b.s.data() + i * d);
    std::copy_n(teacher.hidden.data() + p * d, d, b.t.data() + i * d);
    b.target[size_t(i)] = teacher.tokens[size_t(p + 1)];
  }
  grad::linear(b.s.data(), adapter.data(), B, d, d, b.u.data(), pool);
  for (size_t i = 0; i < b.u.size(); ++i) b.u[i] += b.s[i];
  b.zs.resize(size_t(B * r.V)), b.zt.resize(size_t(B * r.V));
  grad::linear(b.u.data(), r.w.data(), B, d, r.V, b.zs.data(), pool);
  grad::linear(b.t.data(), r.w.data(), B, d, r.V, b.zt.data(), pool);
  softcap_rows(b.zs, r.softcap), softcap_rows(b.zt, r.softcap);
}

// Losses per row (dz written when wanted); accept counts same top-1.
struct Sums {
  double loss = 0, kl = 0, tvd = 0;
  int64_t same = 0;
};
Sums losses(const Readout& r, AdapterBatch& b, const grad::LossOptions& lo, bool grads, ThreadPool* pool) {
  const int64_t B = int64_t(b.target.size()), V = r.V;
  if (grads) b.dz.resize(size_t(B * V));
  std::vector<grad::LossParts> parts(static_cast<size_t>(B));
  std::vector<uint8_t> same(static_cast<size_t>(B));
  auto row = [&](int64_t i, std::span<float> dz) {
    grad::LossOptions o = lo;
    o.target = b.target[size_t(i)];
    const std::span<const float> zs(b.zs.data() + i * V, size_t(V)), zt(b.zt.data() + i * V, size_t(V));
    parts[size_t(i)] = grad::distill_loss(zs, zt, o, dz);
    same[size_t(i)] = std::max_element(zs.begin(), zs.end()) - zs.begin() == std::max_element(zt.begin(), zt.end()) - zt.begin();
  };
  pool->parallel_for(B, 1, [&](int64_t begin, int64_t end, int) {
    std::vector<float> local(grads ? 0 : size_t(V));
    for (int64_t i = begin; i < end; ++i) row(i, grads ? std::span<float>(b.dz.data() + i * V, size_t(V)) : std::span<float>(local));
  });
  Sums s;
  for (int64_t i = 0; i < B; ++i) {
    s.loss += parts[size_t(i)].loss, s.kl += parts[size_t(i)].kl, s.tvd += parts[size_t(i)].tvd;
    s.same += same[size_t(i)];
  }
  return s;
}

// The batch's summed losses; grad_a = d(mean loss)/dA (written).
Sums loss_and_grad(const Readout& r, std::span<const float> adapter, const TeacherFeatures& teacher,
                   const TeacherFeatures& student, std::span<const int64_t> pos, const grad::LossOptions& lo, AdapterBatch& b,
                   std::span<float> grad_a, ThreadPool* pool) {
  const int64_t d = r.d, B = int64_t(pos.size());
  forward(r, adapter, teacher, student, pos, b, pool);
  const Sums s = losses(r, b, lo, true, pool);
  for (float& x : b.dz) x /= float(B);  // the mean over the batch
  if (r.softcap > 0)  // through z = c·tanh(y / c)
    for (size_t i = 0; i < b.dz.size(); ++i) b.dz[i] *= 1.f - (b.zs[i] / r.softcap) * (b.zs[i] / r.softcap);
  b.du.resize(size_t(B * d));
  grad::linear_backward(b.u.data(), r.w.data(), b.dz.data(), B, d, r.V, b.du.data(), nullptr, pool, r.w_t.data());
  std::fill(grad_a.begin(), grad_a.end(), 0.f);
  grad::linear_backward(b.s.data(), adapter.data(), b.du.data(), B, d, d, nullptr, grad_a.data(), pool);
  return s;
}

StudentEval evaluate(const Readout& r, std::span<const float> adapter, const TeacherFeatures& teacher,
                     const TeacherFeatures& student, int64_t max_positions, ThreadPool* pool) {
  std::vector<int64_t> pos = positions_of(teacher);
  if (max_positions > 0 && int64_t(pos.size()) > max_positions) pos.resize(size_t(max_positions));
  StudentEval e{.positions = int64_t(pos.size())};
  AdapterBatch b;
  for (size_t i = 0; i < pos.size(); i += 32) {
    const std::span<const int64_t> chunk(pos.data() + i, std::min<size_t>(32, pos.size() - i));
    forward(r, adapter, teacher, student, chunk, b, pool);
    const Sums s = losses(r, b, {}, false, pool);
    e.kl += s.kl, e.tvd += s.tvd, e.accept += double(s.same);
  }
  const double n = double(std::max<int64_t>(e.positions, 1));
  e.kl /= n, e.tvd /= n, e.accept /= n;
  return e;
}

Status check_pair(const TeacherFeatures& t, const TeacherFeatures& s, int64_t d, const char* what) {
  if (t.n_embd != d || s.n_embd != d || t.n_ctx != s.n_ctx || t.tokens != s.tokens)
    return Error{std::string(what) + ": the teacher's and the student's features must be of the same tokens and width",
                 ErrorCode::invalid_argument};
  if (t.chunks() == 0) return Error{std::string(what) + ": no whole chunk of text", ErrorCode::invalid_argument};
  return {};
}

}  // namespace

Result<StudentTrainReport> train_student_adapter(const Model& student, const TeacherFeatures& teacher_train,
                                                 const TeacherFeatures& student_train, const TeacherFeatures& teacher_held,
                                                 const TeacherFeatures& student_held, const StudentTrainOptions& o) {
  auto r = readout_of(student);
  if (!r) return Error{r.error(), r.error_code()};
  const int64_t d = r->d;
  if (auto s = check_pair(teacher_train, student_train, d, "training text"); !s) return Error{s.error(), s.error_code()};
  if (auto s = check_pair(teacher_held, student_held, d, "held-out text"); !s) return Error{s.error(), s.error_code()};
  ThreadPool pool(o.num_threads > 0 ? o.num_threads : ThreadPool::default_threads());
  StudentTrainReport rep;
  rep.adapter.assign(size_t(d * d), 0.f);
  std::vector<float> grad_a(rep.adapter.size()), m(rep.adapter.size()), v(rep.adapter.size());
  rep.before = evaluate(*r, rep.adapter, teacher_held, student_held, o.eval_positions, &pool);
  std::vector<int64_t> pos = positions_of(teacher_train);
  std::mt19937_64 rng(o.seed);
  std::shuffle(pos.begin(), pos.end(), rng);
  const grad::AdamW opt{.lr = o.lr, .weight_decay = o.weight_decay};
  const auto t0 = std::chrono::steady_clock::now();
  size_t next = 0;
  AdapterBatch b;
  for (int64_t step = 1; step <= o.steps; ++step) {
    std::vector<int64_t> take;
    for (int64_t i = 0; i < o.batch; ++i) {
      if (next == pos.size()) std::shuffle(pos.begin(), pos.end(), rng), next = 0;
      take.push_back(pos[next++]);
    }
    const Sums s = loss_and_grad(*r, rep.adapter, teacher_train, student_train, take, o.loss, b, grad_a, &pool);
    const int64_t B = int64_t(take.size());
    const std::span<float> g(grad_a);
    grad::clip_grad_norm(std::span<const std::span<float>>(&g, 1), o.clip);
    const double lr_scale = grad::lr_schedule(step, o.steps, o.warmup);
    opt.step(rep.adapter, grad_a, m, v, step, lr_scale);
    rep.examples += B;
    rep.steps = step;
    if (o.on_progress || (o.eval_every > 0 && step % o.eval_every == 0)) {
      StudentTrainProgress p{.step = step, .steps = o.steps, .loss = s.loss / double(B), .kl = s.kl / double(B),
                             .lr = o.lr * lr_scale, .examples_per_s = 0, .eval = std::nullopt};
      p.examples_per_s = double(rep.examples) / std::max(1e-9, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (o.eval_every > 0 && step % o.eval_every == 0) {
        p.eval = evaluate(*r, rep.adapter, teacher_held, student_held, o.eval_positions, &pool);
        rep.curve.push_back(p);
      }
      if (o.on_progress) o.on_progress(p);
    }
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rep.after = evaluate(*r, rep.adapter, teacher_held, student_held, o.eval_positions, &pool);
  return rep;
}

Result<double> student_loss(const Model& student, std::span<const float> adapter, const TeacherFeatures& teacher,
                            const TeacherFeatures& features, std::span<const int64_t> positions,
                            const grad::LossOptions& loss, std::span<float> grad_a) {
  auto r = readout_of(student);
  if (!r) return Error{r.error(), r.error_code()};
  if (auto s = check_pair(teacher, features, r->d, "features"); !s) return Error{s.error(), s.error_code()};
  ThreadPool pool(1);
  AdapterBatch b;
  return loss_and_grad(*r, adapter, teacher, features, positions, loss, b, grad_a, &pool).loss / double(positions.size());
}

Status write_student(const std::string& student_path, const std::string& out_path, const Model& student,
                     std::span<const float> adapter, const std::vector<std::pair<std::string, std::string>>& info,
                     int num_threads) {
  if (student_path == out_path) return Error{"the output must be another file than the student", ErrorCode::invalid_argument};
  auto file = MappedFile::open(student_path);
  if (!file) return Error{file.error()};
  auto parsed = gguf::parse(file->bytes());
  if (!parsed) return Error{student_path + ": " + parsed.error()};
  const Matrix& out = student.weights().output;
  const int64_t d = out.n_in, V = out.n_out;
  if (int64_t(adapter.size()) != d * d) return Error{"the adapter is not the student's width squared", ErrorCode::invalid_argument};
  const auto* tr = kernels::quant_traits(out.type);
  if (!tr || (out.type != DType::F32 && !tr->quantize_row))
    return Error{"no quantizer for the output's type " + std::string(dtype_name(out.type))};
  gguf::Writer w;
  for (const auto& kv : parsed->kv)
    if (kv.key != "general.alignment") w.set(kv.key, kv.value);
  for (const auto& [k, v] : info) w.set("kvasir.distill." + k, gguf::Value::of_string(v));
  std::vector<const gguf::TensorInfo*> copied;
  for (const auto& t : parsed->tensors) {
    if (t.name == "output.weight") continue;
    w.add_tensor_header(t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims));
    copied.push_back(&t);
  }
  w.add_tensor_header("output.weight", out.type, {d, V});
  // W' = W · (I + A): row v becomes w_v + Aᵀ·w_v, i.e. the product with (I + A) from the right.
  // linear() computes y = x · Mᵀ: M = (I + A)ᵀ.
  std::vector<float> m_t(size_t(d * d));
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < d; ++j) m_t[size_t(j * d + i)] = adapter[size_t(i * d + j)] + (i == j ? 1.f : 0.f);
  ThreadPool pool(num_threads > 0 ? num_threads : ThreadPool::default_threads());
  auto data_of = [&](size_t i) -> Result<std::vector<uint8_t>> {
    if (i < copied.size()) return std::vector<uint8_t>(copied[i]->data, copied[i]->data + copied[i]->nbytes);
    const size_t rb = row_bytes(out.type, d);
    std::vector<uint8_t> bytes(rb * size_t(V));
    pool.parallel_for(V, 256, [&](int64_t begin, int64_t end, int) {
      std::vector<float> row(static_cast<size_t>(d)), moved(static_cast<size_t>(d));
      for (int64_t v = begin; v < end; ++v) {
        tr->dequantize_row(static_cast<const uint8_t*>(out.data) + size_t(v) * rb, row.data(), d);
        grad::linear(row.data(), m_t.data(), 1, d, d, moved.data());
        if (out.type == DType::F32) std::memcpy(bytes.data() + size_t(v) * rb, moved.data(), rb);
        else tr->quantize_row(moved.data(), bytes.data() + size_t(v) * rb, d);
      }
    });
    return bytes;
  };
  return w.write_streaming(out_path, data_of);
}

}  // namespace kvasir::compress
