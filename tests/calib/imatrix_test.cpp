// Importance matrices: what is collected (every block matrix, counts per token and per expert),
// layer 0's statistics against a scalar twin computed from the embeddings, the file round trip,
// the legacy format, and hostile files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <set>

#include "calib/imatrix.h"
#include "core/fp16.h"
#include "format/gguf.h"
#include "kernels/ops.h"
#include "tokenizer/tokenizer.h"

using namespace kvasir;

namespace {

std::string shared(const std::string& rel) { return std::string(KVASIR_SHARED_DIR) + "/" + rel; }

std::unique_ptr<Model> load(const std::string& name) {
  if (!std::ifstream(shared("models/" + name + ".gguf"))) return nullptr;
  auto m = Model::load(shared("models/" + name + ".gguf"));
  return m ? std::move(*m) : nullptr;
}

std::vector<int32_t> random_tokens(size_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}

const gguf::TensorInfo* tensor(const Model& m, const std::string& name) {
  for (const auto& t : m.gguf().tensors)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace

TEST(Imatrix, CollectsEveryBlockMatrixAndMatchesTheScalarTwinAtLayerZero) {
  auto model = load("stories260K");
  if (!model) GTEST_SKIP() << "../shared is not available";
  const auto& c = model->config();
  const int64_t n_ctx = 32, chunks = 3;
  auto tokens = random_tokens(size_t(n_ctx * chunks + 7), int32_t(c.n_vocab), 1);
  auto m = calib::collect_imatrix(*model, tokens, {.n_ctx = n_ctx, .num_threads = 2, .bos = 1, .dataset = "random"});
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(m->chunk_count, uint32_t(chunks));
  EXPECT_EQ(m->chunk_size, uint32_t(n_ctx));
  std::set<std::string> want, got;
  for (const auto& t : model->gguf().tensors)
    if (t.n_dims >= 2 && t.name.starts_with("blk.")) want.insert(t.name);
  for (const auto& [name, e] : m->entries) {
    got.insert(name);
    ASSERT_EQ(e.counts.size(), 1u) << name;
    EXPECT_EQ(e.counts[0], float(n_ctx * chunks)) << name;  // every token of every chunk
    EXPECT_EQ(e.n_in(), tensor(*model, name)->ne[0]) << name;
  }
  EXPECT_EQ(got, want);
  // q, k and v read the same normed rows.
  EXPECT_EQ(m->entries["blk.0.attn_q.weight"].sums, m->entries["blk.0.attn_k.weight"].sums);
  EXPECT_EQ(m->entries["blk.1.attn_q.weight"].sums, m->entries["blk.1.attn_v.weight"].sums);
  // Layer 0's q input is rms_norm(embedding) * attn_norm: summed in double from the file's F32
  // rows, it must match the collector's float sums to float rounding (relative 1e-4 over 96 rows).
  const gguf::TensorInfo* embd = tensor(*model, "token_embd.weight");
  const gguf::TensorInfo* norm = tensor(*model, "blk.0.attn_norm.weight");
  ASSERT_TRUE(embd && norm && embd->type == DType::F32 && norm->type == DType::F32);
  const int64_t d = c.n_embd;
  std::vector<float> w(static_cast<size_t>(d));
  std::memcpy(w.data(), norm->data, size_t(d) * 4);
  auto twin_of = [&](bool bos_first) {
    std::vector<double> twin(static_cast<size_t>(d), 0.0);
    std::vector<float> row(static_cast<size_t>(d)), out(static_cast<size_t>(d));
    for (int64_t ch = 0; ch < chunks; ++ch)
      for (int64_t i = 0; i < n_ctx; ++i) {
        const int32_t t = i == 0 && bos_first ? 1 : tokens[size_t(ch * n_ctx + i)];
        std::memcpy(row.data(), embd->data + size_t(t) * size_t(d) * 4, size_t(d) * 4);
        for (auto& v : row) v *= c.embed_scale;
        kernels::rms_norm(row.data(), w.data(), d, c.norm_eps, out.data());
        for (int64_t j = 0; j < d; ++j) twin[size_t(j)] += double(out[size_t(j)]) * out[size_t(j)];
      }
    return twin;
  };
  const std::vector<double> twin = twin_of(true);
  const auto& q0 = m->entries["blk.0.attn_q.weight"].sums;
  for (int64_t j = 0; j < d; ++j) EXPECT_NEAR(q0[size_t(j)], twin[size_t(j)], 1e-4 * twin[size_t(j)] + 1e-6) << j;
  // The tolerance tells a planted bug (the chunks' first tokens not replaced by BOS) apart.
  const std::vector<double> buggy = twin_of(false);
  int64_t off = 0;
  for (int64_t j = 0; j < d; ++j) off += std::abs(q0[size_t(j)] - buggy[size_t(j)]) > 1e-4 * buggy[size_t(j)] + 1e-6;
  EXPECT_GT(off, d / 2);
  // Too short a text is refused, as llama-imatrix refuses it.
  EXPECT_FALSE(calib::collect_imatrix(*model, std::span(tokens).first(size_t(2 * n_ctx - 1)), {.n_ctx = n_ctx}).ok());
}

TEST(Imatrix, ExpertsAreCountedPerExpert) {
  auto model = load("next/fixture-qwen3moe-q4_k");
  if (!model) GTEST_SKIP() << "../shared is not available";
  const auto& c = model->config();
  const int64_t n_ctx = 32;
  auto m = calib::collect_imatrix(*model, random_tokens(size_t(2 * n_ctx), int32_t(c.n_vocab), 2),
                                  {.n_ctx = n_ctx, .num_threads = 2});
  ASSERT_TRUE(m.ok()) << m.error();
  const auto& gate = m->entries["blk.0.ffn_gate_exps.weight"];
  ASSERT_EQ(int64_t(gate.counts.size()), c.n_experts);
  double total = 0;
  for (float n : gate.counts) total += n;
  EXPECT_EQ(total, double(2 * n_ctx * c.n_experts_used));  // each token's k experts
  EXPECT_EQ(gate.counts, m->entries["blk.0.ffn_down_exps.weight"].counts);
  EXPECT_EQ(m->entries["blk.0.ffn_gate_inp.weight"].counts, std::vector<float>{float(2 * n_ctx)});  // the router
}

TEST(Imatrix, FileRoundTripAndLlamaCppsLegacyFormat) {
  calib::Imatrix m;
  m.entries["blk.0.attn_q.weight"] = {{1.f, 2.f, 3.f, 4.f}, {2.f}};
  m.entries["blk.0.ffn_gate_exps.weight"] = {{1.f, 0.f, 5.f, 6.f}, {0.f, 7.f}};
  m.datasets = {"calibration.txt"};
  m.chunk_count = 3;
  m.chunk_size = 512;
  const std::string path = ::testing::TempDir() + "/kvasir_imatrix_rt.gguf";
  ASSERT_TRUE(calib::write_imatrix(m, path).ok());
  auto back = calib::read_imatrix(path);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->datasets, m.datasets);
  EXPECT_EQ(back->chunk_count, 3u);
  EXPECT_EQ(back->chunk_size, 512u);
  ASSERT_EQ(back->entries.size(), 2u);
  for (const auto& [name, e] : m.entries) {
    EXPECT_EQ(back->entries[name].sums, e.sums) << name;
    EXPECT_EQ(back->entries[name].counts, e.counts) << name;
  }
  EXPECT_FLOAT_EQ(back->entries["blk.0.ffn_gate_exps.weight"].mean(1, 1), 6.f / 7.f);
  // What a quantizer gets: the means, and 1 for the expert no token reached.
  EXPECT_EQ(back->entries["blk.0.ffn_gate_exps.weight"].quantize_weights(), (std::vector<float>{1.f, 1.f, 5.f / 7.f, 6.f / 7.f}));
  // The file is llama.cpp's: general.type and [n_in, n_mat] / [1, n_mat] F32 tensors.
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  auto f = gguf::parse({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f->get_string("general.type"), "imatrix");
  ASSERT_EQ(f->tensors.size(), 4u);
  EXPECT_EQ(f->tensors[0].name, "blk.0.attn_q.weight.in_sum2");
  EXPECT_EQ(f->tensors[0].ne[0], 4);
  EXPECT_EQ(f->tensors[1].name, "blk.0.attn_q.weight.counts");
  EXPECT_EQ(f->tensors[3].ne[1], 2);

  // Legacy: n, {len, name, ncall, nval, values = mean * ncall}, chunk count, dataset.
  std::string legacy;
  auto put = [&](const void* p, size_t n) { legacy.append(static_cast<const char*>(p), n); };
  const int32_t n = 1, len = 19, ncall = 3, nval = 2, chunks = 3, dlen = 4;
  const float vals[2] = {1.5f, 6.f};
  put(&n, 4), put(&len, 4), legacy += "blk.0.attn_k.weight", put(&ncall, 4), put(&nval, 4), put(vals, 8);
  put(&chunks, 4), put(&dlen, 4), legacy += "text";
  auto l = calib::parse_imatrix({reinterpret_cast<const uint8_t*>(legacy.data()), legacy.size()});
  ASSERT_TRUE(l.ok()) << l.error();
  EXPECT_EQ(l->entries["blk.0.attn_k.weight"].sums, (std::vector<float>{1.5f, 6.f}));
  EXPECT_FLOAT_EQ(l->entries["blk.0.attn_k.weight"].mean(0, 1), 2.f);
  EXPECT_EQ(l->chunk_count, 3u);
  EXPECT_EQ(l->datasets, std::vector<std::string>{"text"});
}

TEST(Imatrix, HostileFilesAreRefusedNeverTrusted) {
  calib::Imatrix m;
  m.entries["blk.0.attn_q.weight"] = {{1.f, 2.f}, {1.f}};
  const std::string path = ::testing::TempDir() + "/kvasir_imatrix_bad.gguf";
  ASSERT_TRUE(calib::write_imatrix(m, path).ok());
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  auto parse = [](const std::string& b) { return calib::parse_imatrix({reinterpret_cast<const uint8_t*>(b.data()), b.size()}); };
  // Cut anywhere before the last tensor's data ends (the file ends with up to 31 bytes of padding).
  for (size_t cut = 0; cut + 31 < bytes.size(); cut += 3) EXPECT_FALSE(parse(bytes.substr(0, cut)).ok()) << cut;
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {  // flipped bytes: parsed or refused, never a crash
    std::string b = bytes;
    b[rng() % b.size()] = char(rng());
    (void)parse(b);
  }
  const std::string huge = std::string("\xff\xff\xff\x7f", 4) + std::string(8, '\0');
  EXPECT_FALSE(parse(huge).ok());
  EXPECT_FALSE(parse("").ok());
  ASSERT_TRUE(calib::write_imatrix(calib::Imatrix{}, path).ok());  // no entries: nothing to quantize with
  EXPECT_FALSE(calib::read_imatrix(path).ok());
}
