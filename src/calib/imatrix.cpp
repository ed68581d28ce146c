#include "calib/imatrix.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "format/gguf.h"
#include "format/mapped_file.h"
#include "calib/tensor_index.h"
#include "runtime/cpu_runner.h"
#include "runtime/session.h"

namespace kvasir::calib {

namespace {

class Collector {
 public:
  Collector(const Model& model, bool process_output) : index_(model.gguf(), process_output) {}

  void observe(std::span<const Matrix* const> weights, const float* x, int64_t rows) {
    std::array<std::pair<const gguf::TensorInfo*, int64_t>, 3> seen{};
    size_t n_seen = 0;
    for (const Matrix* w : weights) {
      const auto slice = index_.find(*w);
      if (!slice) continue;  // not a collected tensor (e.g. tied output)
      const gguf::TensorInfo& t = *slice->tensor;
      const int64_t mat = slice->mat, n_in = t.ne[0], n_mat = t.ne[2] * t.ne[3];
      // Views of one tensor in one call (q/k/v cut from attn_qkv) count once.
      if (std::find(seen.begin(), seen.begin() + ptrdiff_t(n_seen), std::make_pair(&t, mat)) != seen.begin() + ptrdiff_t(n_seen))
        continue;
      seen[n_seen++] = {&t, mat};
      ImatrixEntry& e = out.entries[t.name];
      if (e.counts.empty()) {
        e.counts.assign(size_t(n_mat), 0.f);
        e.sums.assign(size_t(n_mat * n_in), 0.f);
        counts_[t.name].assign(size_t(n_mat), 0);
      }
      // As llama-imatrix accumulates: in float, row by row.
      float* acc = e.sums.data() + mat * n_in;
      for (int64_t row = 0; row < rows; ++row) {
        const float* v = x + row * n_in;
        for (int64_t j = 0; j < n_in; ++j) acc[j] += v[j] * v[j];
      }
      counts_[t.name][size_t(mat)] += rows;
    }
  }

  Imatrix finish() {
    for (auto& [name, e] : out.entries)
      for (size_t m = 0; m < e.counts.size(); ++m) e.counts[m] = float(counts_[name][m]);
    return std::move(out);
  }

  Imatrix out;

 private:
  TensorIndex index_;
  std::map<std::string, std::vector<int64_t>> counts_;  // exact while summing; floats only in the file
};

// Little-endian readers over a byte span that refuse to read past the end.
struct Reader {
  std::span<const uint8_t> b;
  size_t at = 0;
  bool ok = true;
  template <typename T>
  T get() {
    T v{};
    if (at + sizeof(T) > b.size()) {
      ok = false;
      return v;
    }
    std::memcpy(&v, b.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  std::string str(size_t n) {
    if (at + n > b.size()) {
      ok = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(b.data() + at), n);
    at += n;
    return s;
  }
};

// The older binary form: entries {name, ncall, nval, values = mean * ncall}, then optionally the
// chunk count and the dataset name.
Result<Imatrix> parse_legacy(std::span<const uint8_t> bytes) {
  auto bad = [](const std::string& why) { return Error{"imatrix (legacy format): " + why, ErrorCode::invalid_argument}; };
  Reader r{bytes};
  const int32_t n = r.get<int32_t>();
  if (!r.ok || n < 1 || size_t(n) > bytes.size() / 12) return bad("bad entry count");
  Imatrix m;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t len = r.get<int32_t>();
    if (!r.ok || len < 1 || len > 4096) return bad("entry " + std::to_string(i) + ": bad name length");
    std::string name = r.str(size_t(len));
    const int32_t ncall = r.get<int32_t>();
    const int32_t nval = r.get<int32_t>();
    if (!r.ok || nval < 1 || size_t(nval) > (bytes.size() - r.at) / 4) return bad("entry '" + name + "': bad value count");
    ImatrixEntry& e = m.entries[name];
    e.sums.resize(size_t(nval));
    for (auto& v : e.sums) v = r.get<float>();
    e.counts = {float(ncall)};
  }
  if (!r.ok) return bad("truncated");
  if (r.at < bytes.size()) {  // optional trailer
    const int32_t chunks = r.get<int32_t>();
    const int32_t len = r.get<int32_t>();
    if (r.ok && chunks >= 0) m.chunk_count = uint32_t(chunks);
    if (r.ok && len > 0 && size_t(len) <= bytes.size() - r.at) m.datasets.push_back(r.str(size_t(len)));
  }
  return m;
}

}  // namespace

float ImatrixEntry::mean(int64_t m, int64_t j) const {
  const float c = counts[size_t(m)];
  return c > 0 ? sums[size_t(m * n_in() + j)] / c : 0.f;
}

std::vector<float> ImatrixEntry::quantize_weights() const {
  std::vector<float> w(sums.size());
  const int64_t n = n_in();
  for (size_t m = 0; m < counts.size(); ++m)
    for (int64_t j = 0; j < n; ++j) w[m * size_t(n) + size_t(j)] = counts[m] > 0 ? mean(int64_t(m), j) : 1.f;
  return w;
}

Result<Imatrix> collect_imatrix(const Model& model, std::span<const int32_t> tokens, const ImatrixOptions& o) {
  if (o.n_ctx < 16) return Error{"the chunk size must be at least 16 tokens", ErrorCode::invalid_argument};
  if (int64_t(tokens.size()) < 2 * o.n_ctx)
    return Error{"the text has " + std::to_string(tokens.size()) + " tokens; an importance matrix with chunks of " +
                     std::to_string(o.n_ctx) + " needs at least " + std::to_string(2 * o.n_ctx),
                 ErrorCode::invalid_argument};
  int64_t chunks = int64_t(tokens.size()) / o.n_ctx;
  if (o.max_chunks >= 0) chunks = std::min(chunks, o.max_chunks);
  const runtime::SessionOptions so{.n_ctx = o.n_ctx, .max_batch_tokens = o.n_ctx, .n_threads = o.num_threads};
  auto runner = runtime::CpuRunner::create(model, so.runner_options());  // the CPU's Forward takes the hook
  if (!runner) return Error{runner.error(), runner.error_code()};
  Forward& fwd = (*runner)->forward_pass();
  auto session = runtime::Session::create(std::move(*runner), o.n_ctx);
  if (!session) return Error{session.error()};
  Collector c(model, o.process_output);
  fwd.set_activation_hook(
      [&c](std::span<const Matrix* const> w, const float* x, int64_t rows) { c.observe(w, x, rows); });
  std::vector<int32_t> chunk(size_t(o.n_ctx));
  for (int64_t i = 0; i < chunks; ++i) {
    std::copy_n(tokens.begin() + i * o.n_ctx, o.n_ctx, chunk.begin());
    if (o.bos >= 0) chunk[0] = o.bos;
    (*session)->reset();
    // The output matrix sees only rows that want logits: every row when it is collected.
    if (auto s = (*session)->eval(chunk, o.process_output, [](int64_t, const float*) {}); !s) return Error{s.error()};
    if (o.on_chunk) o.on_chunk(i + 1, chunks);
  }
  fwd.set_activation_hook({});
  Imatrix m = c.finish();
  for (const auto& [name, e] : m.entries)
    for (float v : e.sums)
      if (!std::isfinite(v)) return Error{"non-finite activations in " + name};
  m.chunk_count = uint32_t(chunks);
  m.chunk_size = uint32_t(o.n_ctx);
  if (!o.dataset.empty()) m.datasets.push_back(o.dataset);
  return m;
}

Status write_imatrix(const Imatrix& m, const std::string& path) {
  gguf::Writer w;
  w.set("general.type", gguf::Value::of_string("imatrix"));
  std::vector<gguf::Value> sets;
  for (const auto& d : m.datasets) sets.push_back(gguf::Value::of_string(d));
  w.set("imatrix.datasets", gguf::Value::of_array(gguf::ValueType::STRING, std::move(sets)));
  w.set("imatrix.chunk_count", gguf::Value::of_u32(m.chunk_count));
  w.set("imatrix.chunk_size", gguf::Value::of_u32(m.chunk_size));
  auto bytes_of = [](const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(float));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  for (const auto& [name, e] : m.entries) {  // std::map: sorted by name, as llama.cpp writes them
    if (e.counts.empty() || e.sums.size() % e.counts.size() != 0) return Error{"imatrix entry '" + name + "' is malformed"};
    const int64_t n_mat = int64_t(e.counts.size());
    w.add_tensor(name + ".in_sum2", DType::F32, {e.n_in(), n_mat}, bytes_of(e.sums));
    w.add_tensor(name + ".counts", DType::F32, {1, n_mat}, bytes_of(e.counts));
  }
  return w.write(path);
}

Result<Imatrix> parse_imatrix(std::span<const uint8_t> bytes) {
  if (bytes.size() < 4 || std::memcmp(bytes.data(), "GGUF", 4) != 0) return parse_legacy(bytes);
  auto f = gguf::parse(bytes);
  if (!f) return Error{"imatrix: " + f.error(), ErrorCode::invalid_argument};
  Imatrix m;
  if (const gguf::Value* d = f->find("imatrix.datasets"); d && d->type == gguf::ValueType::ARRAY)
    for (const auto& item : d->items)
      if (item.type == gguf::ValueType::STRING) m.datasets.push_back(item.str);
  if (auto c = f->get_int("imatrix.chunk_count")) m.chunk_count = uint32_t(std::clamp<int64_t>(*c, 0, UINT32_MAX));
  if (auto c = f->get_int("imatrix.chunk_size")) m.chunk_size = uint32_t(std::clamp<int64_t>(*c, 0, UINT32_MAX));
  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> parts;
  for (const auto& t : f->tensors) {
    if (t.name.ends_with(".in_sum2")) parts[t.name.substr(0, t.name.size() - 8)].first = &t;
    else if (t.name.ends_with(".counts")) parts[t.name.substr(0, t.name.size() - 7)].second = &t;
  }
  if (parts.empty()) return Error{"imatrix: the file has no .in_sum2 / .counts tensors", ErrorCode::invalid_argument};
  for (const auto& [name, p] : parts) {
    const auto [sums, counts] = p;
    if (!sums || !counts) return Error{"imatrix: '" + name + "' lacks its " + (sums ? ".counts" : ".in_sum2") + " tensor",
                                       ErrorCode::invalid_argument};
    if (sums->type != DType::F32 || counts->type != DType::F32)
      return Error{"imatrix: '" + name + "' is not F32", ErrorCode::invalid_argument};
    const int64_t n_mat = counts->num_elements(), n_val = sums->num_elements();
    if (n_mat < 1 || n_val % n_mat != 0) return Error{"imatrix: '" + name + "' has mismatched sizes", ErrorCode::invalid_argument};
    ImatrixEntry& e = m.entries[name];
    e.sums.resize(size_t(n_val));
    e.counts.resize(size_t(n_mat));
    std::memcpy(e.sums.data(), sums->data, e.sums.size() * sizeof(float));
    std::memcpy(e.counts.data(), counts->data, e.counts.size() * sizeof(float));
  }
  return m;
}

Result<Imatrix> read_imatrix(const std::string& path) {
  auto f = MappedFile::open(path);
  if (!f) return Error{path + ": " + f.error(), ErrorCode::invalid_argument};
  auto m = parse_imatrix(f->bytes());
  if (!m) return Error{path + ": " + m.error(), m.error_code()};
  return m;
}

}  // namespace kvasir::calib
