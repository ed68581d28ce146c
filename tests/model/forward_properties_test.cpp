// Properties of the batched forward pass on real fixture models:
//  - a sequence run inside a ragged batch of several gets bitwise the same logits as run alone
//    (with an F16 KV cache, and Q8_0 / Q4_0 where the head size allows);
//  - decoding token by token equals one prefill of the same tokens (within float noise);
//  - bad batches are rejected with an error, not a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <random>

#include "golden_util.h"
#include "model/config.h"
#include "model/forward.h"
#include "backends/runner_factory.h"
#include "kernels/attention.h"
#include "kernels/ops.h"

using namespace kvasir;

namespace {

std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n, int32_t vocab) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = int32_t(rng() % uint32_t(vocab));
  return t;
}

// Logits of every position of `tokens` run alone through a Session (chunks of `chunk`).
std::vector<std::vector<float>> run_alone(const Model& m, const std::vector<int32_t>& tokens, int64_t chunk,
                                          DType kv_type = DType::F16) {
  auto s = backends::create_session(m, {.n_ctx = 512, .max_batch_tokens = chunk, .n_threads = 2, .kv = {.type = kv_type}});
  EXPECT_TRUE(s.ok());
  std::vector<std::vector<float>> out;
  const int64_t V = m.config().n_vocab;
  EXPECT_TRUE((*s)->eval(tokens, true, [&](int64_t, const float* l) { out.emplace_back(l, l + V); }).ok());
  return out;
}

class ForwardProperties : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(ForwardProperties, BatchedEqualsAloneBitwise) {
  auto model = Model::load(shared_path("models/" + GetParam() + ".gguf"));
  ASSERT_TRUE(model.ok()) << model.error();
  const Model& m = **model;
  const int64_t V = m.config().n_vocab;
  std::mt19937 rng(123);
  const std::vector<size_t> lengths = {23, 5, 40, 1};
  std::vector<std::vector<int32_t>> seqs;
  for (size_t n : lengths) seqs.push_back(random_tokens(rng, n, int32_t(V)));

  // Every KV type the model's head size allows: the quantized blocks too are per row.
  std::vector<DType> kv_types = {DType::F16};
  if (m.config().head_dim % 32 == 0) kv_types.insert(kv_types.end(), {DType::Q8_0, DType::Q4_0});
  for (DType kv_type : kv_types) {
  SCOPED_TRACE(std::string("KV ") + std::string(dtype_name(kv_type)));
  // Each sequence alone, in one prefill (chunk = its length).
  std::vector<std::vector<std::vector<float>>> alone;
  for (const auto& s : seqs) alone.push_back(run_alone(m, s, int64_t(s.size()), kv_type));

  // All of them at once in ragged steps: prefill chunks of different sizes interleaved with
  // other sequences' rows, over a shared KV pool with scattered blocks.
  const int64_t block = 16;
  auto kv = KvCache::create(m.config(), {.n_blocks = 64, .block_size = block, .type = kv_type});
  ASSERT_TRUE(kv.ok());
  std::vector<std::vector<int32_t>> tables(seqs.size());
  int32_t next_block = 63;
  for (auto& t : tables)
    for (int i = 0; i < 4; ++i) t.push_back(next_block--);  // descending ids: nothing contiguous
  Forward fwd(m, {.max_batch_tokens = 64, .num_threads = 2});
  std::vector<size_t> done(seqs.size(), 0);
  std::vector<std::vector<std::vector<float>>> batched(seqs.size());
  const size_t chunk_sizes[] = {7, 1, 13, 3};
  for (int step = 0; step < 100; ++step) {
    Batch b;
    for (size_t s = 0; s < seqs.size(); ++s) b.add_sequence(tables[s]);
    for (size_t s = 0; s < seqs.size(); ++s) {
      const size_t take = std::min(seqs[s].size() - done[s], chunk_sizes[(s + size_t(step)) % 4]);
      for (size_t i = done[s]; i < done[s] + take; ++i) b.add(seqs[s][i], int32_t(i), int32_t(s), true);
    }
    if (b.size() == 0) break;
    auto logits = fwd.forward(b, *kv);
    ASSERT_TRUE(logits.ok()) << logits.error();
    for (int64_t r = 0; r < b.size(); ++r) {
      const size_t s = size_t(b.seq_index[size_t(r)]);
      batched[s].emplace_back(*logits + r * V, *logits + (r + 1) * V);
      done[s]++;
    }
  }
  for (size_t s = 0; s < seqs.size(); ++s) {
    ASSERT_EQ(batched[s].size(), alone[s].size());
    for (size_t p = 0; p < alone[s].size(); ++p) EXPECT_EQ(batched[s][p], alone[s][p]) << "seq " << s << " pos " << p;
  }
  }
}

// One long sequence decoding alone leaves the threads too few (tile, KV head) units, so Forward
// splits its keys by span (kernels::kAttentionSpan) and merges the partials; in a crowd the same
// row is computed whole by one thread. The logits must be bitwise the same.
TEST_P(ForwardProperties, LongDecodeSplitByKeySpanEqualsCrowded) {
  auto model = Model::load(shared_path("models/" + GetParam() + ".gguf"));
  ASSERT_TRUE(model.ok()) << model.error();
  const Model& m = **model;
  const int64_t V = m.config().n_vocab, block = 16, n_long = kernels::kAttentionSpan + 90;
  std::mt19937 rng(99);
  const auto long_seq = random_tokens(rng, size_t(n_long + 2), int32_t(V));
  std::vector<std::vector<int32_t>> shorts;
  for (int i = 0; i < 4; ++i) shorts.push_back(random_tokens(rng, 11, int32_t(V)));
  std::vector<int32_t> long_table;
  for (int32_t i = 0; i < int32_t((n_long + 2 + block - 1) / block); ++i) long_table.push_back(i);
  std::vector<std::vector<int32_t>> short_tables;
  for (int32_t i = 0; i < 4; ++i) short_tables.push_back({int32_t(long_table.size()) + i});
  const int64_t blocks = int64_t(long_table.size()) + 4;

  // Logits of the long sequence's last two positions, decoded with or without the crowd.
  auto run = [&](bool crowd) {
    auto kv = KvCache::create(m.config(), {.n_blocks = blocks, .block_size = block, .type = DType::F16});
    EXPECT_TRUE(kv.ok());
    Forward fwd(m, {.max_batch_tokens = 64, .num_threads = 2});
    for (int64_t done = 0; done < n_long;) {  // the same prefill chunks either way
      Batch b;
      b.add_sequence(long_table);
      for (int64_t i = done; i < std::min(n_long, done + 64); ++i) b.add(long_seq[size_t(i)], int32_t(i), 0, false);
      EXPECT_TRUE(fwd.forward(b, *kv).ok());
      done += b.size();
    }
    std::vector<std::vector<float>> out;
    for (int64_t pos = n_long; pos < n_long + 2; ++pos) {
      Batch b;
      b.add_sequence(long_table);
      b.add(long_seq[size_t(pos)], int32_t(pos), 0, true);
      if (crowd)
        for (int32_t s = 0; s < 4; ++s) {
          b.add_sequence(short_tables[size_t(s)]);
          b.add(shorts[size_t(s)][size_t(pos - n_long)], int32_t(pos - n_long), s + 1, true);
        }
      auto logits = fwd.forward(b, *kv);
      EXPECT_TRUE(logits.ok()) << logits.error();
      if (logits.ok()) out.emplace_back(*logits, *logits + V);
    }
    return out;
  };
  const auto alone = run(false), crowded = run(true);
  ASSERT_EQ(alone.size(), 2u);
  ASSERT_EQ(crowded.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(alone[i], crowded[i]) << "decode step " << i;
}

// A verify step: a few consecutive rows of one sequence alone (drafts checked in one forward).
// With fewer (tile, KV head) units than threads Forward halves the tile so both threads attend;
// every row's logits must be bitwise those of decoding the rows one at a time.
TEST_P(ForwardProperties, FewRowsOfOneSequenceEqualOneAtATimeBitwise) {
  auto model = Model::load(shared_path("models/" + GetParam() + ".gguf"));
  ASSERT_TRUE(model.ok()) << model.error();
  std::mt19937 rng(7);
  const auto tokens = random_tokens(rng, 41, int32_t((*model)->config().n_vocab));
  const auto one = run_alone(**model, tokens, 1);
  for (int64_t rows : {2, 4, 5}) {
    const auto tiled = run_alone(**model, tokens, rows);
    ASSERT_EQ(tiled.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i) ASSERT_EQ(tiled[i], one[i]) << rows << " rows a step, position " << i;
  }
}

TEST_P(ForwardProperties, DecodeEqualsPrefill) {
  auto model = Model::load(shared_path("models/" + GetParam() + ".gguf"));
  ASSERT_TRUE(model.ok()) << model.error();
  std::mt19937 rng(7);
  const auto tokens = random_tokens(rng, 37, int32_t((*model)->config().n_vocab));
  // F32 KV so that the only difference is the attention kernel's block order.
  const auto prefill = run_alone(**model, tokens, 64, DType::F32);
  const auto decode = run_alone(**model, tokens, 1, DType::F32);
  ASSERT_EQ(prefill.size(), decode.size());
  // Prefill and decode run the same kernels row by row, so they agree exactly; we state a float
  // tolerance (1e-5 relative to the logits' scale) in case a future GEMM tiles differently.
  for (size_t p = 0; p < prefill.size(); ++p) {
    double max_abs = 0, scale = 0;
    for (size_t i = 0; i < prefill[p].size(); ++i) {
      max_abs = std::max(max_abs, double(std::fabs(prefill[p][i] - decode[p][i])));
      scale = std::max(scale, double(std::fabs(prefill[p][i])));
    }
    EXPECT_LE(max_abs, 1e-5 * scale) << "position " << p;
  }
}

// forward_layers (calibration's block-at-a-time pass): running the layers in two ranges, the
// residual handed from one to the next, gives bitwise the residual of one pass over all of them,
// and that residual, normed, is forward()'s final hidden state.
TEST_P(ForwardProperties, LayerRangesCompose) {
  auto model = Model::load(shared_path("models/" + GetParam() + ".gguf"));
  ASSERT_TRUE(model.ok()) << model.error();
  const Model& m = **model;
  const auto& c = m.config();
  std::mt19937 rng(9);
  const auto tokens = random_tokens(rng, 37, int32_t(c.n_vocab));
  auto kv = KvCache::create(c, {.n_blocks = 8, .block_size = 16, .type = DType::F16});
  ASSERT_TRUE(kv.ok());
  std::vector<int32_t> table = {3, 1, 6};
  Batch b;
  b.add_sequence(table);
  for (size_t i = 0; i < tokens.size(); ++i) b.add(tokens[i], int32_t(i), 0, false, true);
  Forward fwd(m, {.max_batch_tokens = 64, .num_threads = 2});
  const size_t floats = tokens.size() * size_t(c.n_embd);
  std::vector<float> whole(floats), split(floats);
  ASSERT_TRUE(fwd.forward_layers(b, *kv, 0, c.n_layers, whole.data()).ok());
  const int64_t mid = c.n_layers / 2;
  ASSERT_TRUE(fwd.forward_layers(b, *kv, 0, mid, split.data()).ok());
  ASSERT_TRUE(fwd.forward_layers(b, *kv, mid, c.n_layers, split.data()).ok());
  EXPECT_EQ(whole, split);
  ASSERT_TRUE(fwd.forward(b, *kv).ok());
  std::vector<float> normed(static_cast<size_t>(c.n_embd));
  for (size_t t = 0; t < tokens.size(); ++t) {
    kernels::rms_norm(whole.data() + t * size_t(c.n_embd), m.weights().output_norm.data(), c.n_embd, c.norm_eps, normed.data());
    ASSERT_EQ(std::vector<float>(fwd.hidden() + t * size_t(c.n_embd), fwd.hidden() + (t + 1) * size_t(c.n_embd)), normed) << t;
  }
  EXPECT_FALSE(fwd.forward_layers(b, *kv, mid, mid, split.data()).ok());
  EXPECT_FALSE(fwd.forward_layers(b, *kv, 0, c.n_layers + 1, split.data()).ok());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ForwardProperties,
                         // next/: qwen3 (query width != n_embd), qwen3moe (each ragged step's rows pick
                         // different experts of 8, so rows share experts with changing neighbours),
                         // gemma2 (soft-capped attention), phi3 (fused QKV and gate|up).
                         ::testing::Values("fixture-llama-q4_k_m", "fixture-qwen2-q8_0", "fixture-gemma3-f32",
                                           "stories260K", "next/fixture-qwen3-q8_0", "next/fixture-qwen3moe-q4_k",
                                           "next/fixture-qwen3moe-f32", "next/fixture-gemma2-q8_0",
                                           "next/fixture-phi3-f16"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(Forward, RejectsBadBatches) {
  auto model = Model::load(shared_path("models/stories260K.gguf"));
  ASSERT_TRUE(model.ok());
  auto kv = KvCache::create((*model)->config(), {.n_blocks = 2, .block_size = 16});
  ASSERT_TRUE(kv.ok());
  Forward fwd(**model, {.max_batch_tokens = 8, .num_threads = 1});
  std::vector<int32_t> table = {0, 1};
  auto expect_error = [&](Batch b, const std::string& fragment) {
    Batch full = b;  // `table` becomes sequence 0, b's own tables follow
    full.block_ids.clear();
    full.block_start.assign(1, 0);
    full.add_sequence(table);
    for (int32_t s = 0; s < b.n_seqs(); ++s) full.add_sequence(b.blocks_of(s));
    auto r = fwd.forward(full, *kv);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().find(fragment), std::string::npos) << r.error();
  };
  expect_error(Batch{}, "batch of 0 tokens");
  { Batch b; b.add(100000, 0, 0, true); expect_error(b, "outside the vocabulary"); }
  { Batch b; b.add(1, 32, 0, true); expect_error(b, "not covered"); }
  { Batch b; b.add(1, 0, 5, true); expect_error(b, "no block table"); }
  { Batch b; for (int i = 0; i < 9; ++i) b.add(1, i, 0, true); expect_error(b, "batch of 9 tokens"); }
  std::vector<int32_t> bad = {7};
  { Batch b; b.add(1, 0, 0, true); b.add_sequence(bad); b.seq_index[0] = 1; expect_error(b, "block id out of range"); }
}

TEST(Session, ContextOverflowIsAnError) {
  auto model = Model::load(shared_path("models/stories260K.gguf"));
  ASSERT_TRUE(model.ok());
  auto s = backends::create_session(**model, {.n_ctx = 16, .n_threads = 1});
  ASSERT_TRUE(s.ok());
  std::vector<int32_t> tokens(17, 5);
  auto st = (*s)->eval(tokens, false, [](int64_t, const float*) {});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().find("context full"), std::string::npos);
  EXPECT_EQ((*s)->n_past(), 0);
}

TEST(Model, UnknownArchitectureListsSupportedOnes) {
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::of_string("mamba"));
  const std::string path = ::testing::TempDir() + "/mamba.gguf";
  ASSERT_TRUE(w.write(path).ok());
  auto m = Model::load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().find("unsupported architecture 'mamba'"), std::string::npos) << m.error();
  EXPECT_NE(m.error().find("llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3"), std::string::npos) << m.error();
}

// Quantized KV caches refuse what they cannot hold, with the reason.
TEST(KvCache, QuantizedTypesNeedWholeBlocks) {
  if (!std::ifstream(shared_path("models/fixture-gemma3-f32.gguf"))) GTEST_SKIP() << "../shared is not available";
  auto stories = Model::load(shared_path("models/stories260K.gguf"));  // head size 8
  ASSERT_TRUE(stories.ok());
  auto bad = KvCache::create((*stories)->config(), {.n_blocks = 4, .block_size = 16, .type = DType::Q8_0});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("head size"), std::string::npos) << bad.error();
  auto gemma = Model::load(shared_path("models/fixture-gemma3-f32.gguf"));
  ASSERT_TRUE(gemma.ok());
  const auto& c = (*gemma)->config();
  EXPECT_TRUE(KvCache::create(c, {.n_blocks = 4, .block_size = 16, .type = DType::Q4_0}).ok());
  EXPECT_FALSE(KvCache::create(c, {.n_blocks = 4, .block_size = 16, .type = DType::Q5_0}).ok());
  // Q8_0 pages interleave keys eight at a time.
  auto odd = KvCache::create(c, {.n_blocks = 4, .block_size = 12, .type = DType::Q8_0});
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().find("multiple of 8"), std::string::npos) << odd.error();
  EXPECT_TRUE(KvCache::create(c, {.n_blocks = 4, .block_size = 8, .type = DType::Q8_0}).ok());
  EXPECT_FALSE(KvCache::create(c, {.n_blocks = 4, .block_size = 16, .type = DType::Q8_0, .layer_types = {DType::F16}}).ok());
  std::vector<DType> mixed(size_t(c.n_layers), DType::Q8_0);
  mixed[0] = DType::F16;
  auto kv = KvCache::create(c, {.n_blocks = 4, .block_size = 16, .type = DType::Q8_0, .layer_types = mixed});
  ASSERT_TRUE(kv.ok()) << kv.error();
  EXPECT_EQ(kv->layer(0).type, DType::F16);
  EXPECT_EQ(kv->layer(1).type, DType::Q8_0);
  EXPECT_LT(KvCache::bytes_per_token(c, kv->options()), KvCache::bytes_per_token(c, DType::F16));
}

// Hardening II: a NaN (or absurd) hyperparameter is refused at load, naming its GGUF key; a NaN
// norm epsilon used to load and emit only <unk>.
TEST(Model, NanOrAbsurdHyperparametersAreRefusedByKey) {
  auto config_with = [](const std::string& key, float v) {
    gguf::Writer w;
    w.set("general.architecture", gguf::Value::of_string("llama"));
    w.set("llama.embedding_length", gguf::Value::of_u32(8));
    w.set("llama.block_count", gguf::Value::of_u32(1));
    w.set("llama.attention.head_count", gguf::Value::of_u32(2));
    w.set("llama.feed_forward_length", gguf::Value::of_u32(16));
    w.set("llama.vocab_size", gguf::Value::of_u32(32));
    if (!key.empty()) w.set(key, gguf::Value::of_f32(v));
    const std::vector<uint8_t> bytes = w.to_bytes();
    auto file = gguf::parse(bytes);
    EXPECT_TRUE(file.ok());
    return config_from_gguf(*file);
  };
  ASSERT_TRUE(config_with("", 0).ok()) << config_with("", 0).error();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::pair<const char*, float> bad[] = {
      {"llama.attention.layer_norm_rms_epsilon", nan}, {"llama.attention.layer_norm_rms_epsilon", 0.f},
      {"llama.attention.layer_norm_rms_epsilon", -1e-5f}, {"llama.attention.layer_norm_rms_epsilon", inf},
      {"llama.rope.freq_base", nan}, {"llama.rope.freq_base", inf}, {"llama.rope.scaling.factor", nan},
      {"llama.attention.scale", nan}, {"llama.attention.scale", -inf}};
  for (const auto& [key, v] : bad) {
    auto c = config_with(key, v);
    ASSERT_FALSE(c.ok()) << key << " = " << v;
    EXPECT_NE(c.error().find(key), std::string::npos) << c.error();
  }
  EXPECT_TRUE(config_with("llama.attention.layer_norm_rms_epsilon", 1e-6f).ok());
}
