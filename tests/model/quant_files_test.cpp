// Bit-compatibility with llama.cpp: the fixture models were quantized by llama-quantize --pure
// from fixture-llama-f32.gguf, so quantizing each f32 tensor with our reference quantizer must
// give the file's bytes exactly; and dequantizing each file tensor must land close to the f32
// weights (normalized MSE under a per-type bound).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/mapped_file.h"
#include "kernels/quant/quant.h"

using namespace kvasir;

namespace {

struct Loaded {
  MappedFile map;
  gguf::File file;
};

Loaded load(const std::string& name) {
  const std::string path = std::string(KVASIR_SHARED_DIR) + "/models/" + name;
  Loaded l;
  auto map = MappedFile::open(path);
  if (!map) {
    ADD_FAILURE() << path << ": " << map.error();
    return l;
  }
  l.map = std::move(*map);
  auto file = gguf::parse(l.map.bytes());
  if (!file) {
    ADD_FAILURE() << path << ": " << file.error();
    return l;
  }
  l.file = std::move(*file);  // tensor data points into the mapping, which moves with l
  return l;
}

struct Case {
  const char* suffix;  // fixture-llama-<suffix>.gguf
  DType type;
  // Bound on sum((x - deq)^2) / sum(x^2) over a tensor. Rounding noise is about step^2/12 per
  // element; e.g. Q4_0 on near-Gaussian weights: a 32-block's extreme is ~2.1 sigma, step =
  // extreme/8 ~ 0.26 sigma, noise ~ 0.0057 sigma^2, plus clamping at +8 -> measured 0.0074.
  // Each bound is about twice the worst tensor measured on these fixtures.
  double max_nmse;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.suffix; }

class QuantFileTest : public ::testing::TestWithParam<Case> {};

double nmse(const float* ref, const float* got, int64_t n) {
  double err = 0, sig = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(ref[i]) - got[i];
    err += d * d;
    sig += double(ref[i]) * ref[i];
  }
  return sig > 0 ? err / sig : err;
}

// Quantizes every 2-D tensor of `q` whose type passes `want` from its f32 twin in `f32` and
// compares bytes; returns how many tensors were compared.
template <typename Want>
int expect_same_bytes(const gguf::File& f32, const gguf::File& q, Want want) {
  int checked = 0;
  for (const auto& t : q.tensors) {
    if (t.n_dims != 2 || !want(t.type)) continue;
    const kernels::QuantTraits* tr = kernels::quant_traits(t.type);
    if (!tr || !tr->quantize_row) {
      ADD_FAILURE() << t.name << ": no quantizer for " << dtype_name(t.type);
      continue;
    }
    const gguf::TensorInfo* src = f32.tensor(t.name);
    if (!src || src->type != DType::F32 || src->ne[0] != t.ne[0] || src->ne[1] != t.ne[1]) {
      ADD_FAILURE() << t.name << ": no f32 tensor of the same shape";
      continue;
    }
    const size_t rb = row_bytes(t.type, t.ne[0]);
    const size_t bytes = rb * size_t(t.num_rows());
    EXPECT_EQ(bytes, t.nbytes) << t.name;
    std::vector<float> x(static_cast<size_t>(t.num_elements()));
    std::memcpy(x.data(), src->data, x.size() * 4);
    std::vector<uint8_t> mine(bytes);
    // Row by row, as llama-quantize does (the block quantizers never look across blocks anyway).
    for (int64_t r = 0; r < t.num_rows(); ++r)
      tr->quantize_row(x.data() + r * t.ne[0], mine.data() + size_t(r) * rb, t.ne[0]);
    const size_t block = dtype_info(t.type).block_bytes;
    size_t bad_blocks = 0, first_bad = SIZE_MAX;
    for (size_t b = 0; b < bytes / block; ++b) {
      if (std::memcmp(mine.data() + b * block, t.data + b * block, block) != 0) {
        ++bad_blocks;
        if (first_bad == SIZE_MAX) first_bad = b;
      }
    }
    EXPECT_EQ(bad_blocks, 0u) << t.name << " (" << dtype_name(t.type) << "): " << bad_blocks << " of "
                              << bytes / block << " blocks differ, first at block " << first_bad;
    ++checked;
  }
  return checked;
}

TEST_P(QuantFileTest, ReferenceQuantizerMatchesLlamaCppBytes) {
  const Case c = GetParam();
  Loaded f32 = load("fixture-llama-f32.gguf");
  Loaded q = load(std::string("fixture-llama-") + c.suffix + ".gguf");
  const int checked = expect_same_bytes(f32.file, q.file, [&](DType t) { return t == c.type; });
  std::printf("  %s: %d tensors compared\n", c.suffix, checked);
  EXPECT_GT(checked, 0) << "no 2-D tensor of type " << dtype_name(c.type);
}

TEST_P(QuantFileTest, DequantizedTensorsAreCloseToF32) {
  const Case c = GetParam();
  const kernels::QuantTraits* tr = kernels::quant_traits(c.type);
  ASSERT_NE(tr, nullptr);
  Loaded f32 = load("fixture-llama-f32.gguf");
  Loaded q = load(std::string("fixture-llama-") + c.suffix + ".gguf");
  int checked = 0;
  double worst = 0;
  for (const auto& t : q.file.tensors) {
    if (t.n_dims != 2 || t.type != c.type) continue;
    const gguf::TensorInfo* src = f32.file.tensor(t.name);
    ASSERT_NE(src, nullptr) << t.name;
    const int64_t n = t.num_elements();
    std::vector<float> deq(static_cast<size_t>(n));
    tr->dequantize_row(t.data, deq.data(), n);
    const double e = nmse(reinterpret_cast<const float*>(src->data), deq.data(), n);
    EXPECT_LT(e, c.max_nmse) << t.name;
    worst = std::max(worst, e);
    ++checked;
  }
  EXPECT_GT(checked, 0);
  RecordProperty("worst_nmse", std::to_string(worst));
  std::printf("  %s: %d tensors, worst NMSE %.3g (bound %.3g)\n", c.suffix, checked, worst, c.max_nmse);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, QuantFileTest,
    ::testing::Values(Case{"f16", DType::F16, 1e-7}, Case{"bf16", DType::BF16, 6e-6},
                      Case{"q8_0", DType::Q8_0, 6e-5}, Case{"q4_0", DType::Q4_0, 1.5e-2},
                      Case{"q4_1", DType::Q4_1, 1.3e-2}, Case{"q5_0", DType::Q5_0, 4e-3},
                      Case{"q5_1", DType::Q5_1, 3e-3}, Case{"q2_k", DType::Q2_K, 0.18},
                      Case{"q3_k", DType::Q3_K, 5e-2}, Case{"q4_k", DType::Q4_K, 1.1e-2},
                      Case{"q5_k", DType::Q5_K, 3e-3}, Case{"q6_k", DType::Q6_K, 7e-4}),
    [](const ::testing::TestParamInfo<Case>& i) { return std::string(i.param.suffix); });

}  // namespace

// The other fixtures (other architectures, llama.cpp's default Q4_K_M mix, the real stories260K
// model with its default mixes): every quantized 2-D tensor must match too.
TEST(QuantFiles, OtherFixturesMatchLlamaCppBytes) {
  const std::pair<const char*, const char*> pairs[] = {
      {"fixture-llama-f32.gguf", "fixture-llama-q4_k_m.gguf"},
      {"fixture-qwen2-f32.gguf", "fixture-qwen2-q8_0.gguf"},
      {"fixture-qwen2-f32.gguf", "fixture-qwen2-q4_k.gguf"},
      {"fixture-qwen2-f32.gguf", "fixture-qwen2-q6_k.gguf"},
      {"fixture-gemma3-f32.gguf", "fixture-gemma3-q8_0.gguf"},
      {"fixture-gemma3-f32.gguf", "fixture-gemma3-q4_k.gguf"},
      {"fixture-gemma3-f32.gguf", "fixture-gemma3-q6_k.gguf"},
      {"stories260K.gguf", "stories260K-q8_0.gguf"},
      {"stories260K.gguf", "stories260K-q4_0.gguf"},
  };
  for (auto [src, dst] : pairs) {
    SCOPED_TRACE(dst);
    Loaded f32 = load(src);
    Loaded q = load(dst);
    const int checked = expect_same_bytes(f32.file, q.file, [](DType t) { return t != DType::F32; });
    std::printf("  %s: %d tensors compared\n", dst, checked);
    EXPECT_GT(checked, 0);
  }
}
