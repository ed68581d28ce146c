// The encoders' per-thread scratch buffers must not keep the peak size of one huge input: a
// server thread that once tokenized an 8 MB prompt without spaces (one segment of 8M symbols)
// would otherwise hold hundreds of MB for the rest of its life.
#include <gtest/gtest.h>

#include <malloc.h>

#include <thread>

#include "tokenizer_test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define KV_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KV_TEST_ASAN 1
#endif
#endif

namespace kvasir {
namespace {

// Bytes the allocator has handed out: arena chunks plus the large blocks it mmaps directly.
size_t malloc_in_use() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
#else
  return 0;
#endif
}

// Letters only: one SPM segment and one BPE pre-tokenizer word, the largest scratch possible.
std::string text_without_spaces(size_t bytes) {
  std::string s(bytes, 'a');
  uint32_t x = 12345;
  for (char& c : s) {
    x = x * 1103515245u + 12345u;
    c = char('a' + (x >> 16) % 26);
  }
  return s;
}

// Encodes on a fresh thread and measures on it while it lives (its thread_locals die with it).
void expect_scratch_released(const Tokenizer& t) {
#if defined(KV_TEST_ASAN)
  GTEST_SKIP() << "AddressSanitizer has its own allocator";
#endif
  if (malloc_in_use() == 0) GTEST_SKIP() << "needs glibc's mallinfo2";
  const std::string text = text_without_spaces(size_t(8) << 20);
  size_t baseline = 0, after = 0, n_ids = 0;
  std::thread worker([&] {
    (void)t.encode("warm up the small buffers", {.add_special = false});
    baseline = malloc_in_use();
    n_ids = t.encode(text, {.add_special = false}).size();
    after = malloc_in_use();
  });
  worker.join();
  EXPECT_GT(n_ids, text.size() / 64);
  const size_t slack = size_t(2) << 20;
  EXPECT_LE(after, baseline + slack) << "still in use after encoding 8 MB: " << (after - baseline) / 1024
                                     << " KiB more than before";
}

TEST(ScratchMemory, SpmReleasesHugeSegment) {
  KV_REQUIRE_VOCAB(t, "llama-spm");
  expect_scratch_released(*t);
}

TEST(ScratchMemory, BpeReleasesHugeWord) {
  KV_REQUIRE_VOCAB(t, "llama-bpe");
  expect_scratch_released(*t);
}

// The default model (Gemma 3, SPM with a 262k vocabulary), when `make` has fetched it.
TEST(ScratchMemory, DefaultModel) {
  const std::string path = std::string(KVASIR_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
  const Tokenizer* t = test::load_tokenizer_file(path);
  if (!t) GTEST_SKIP() << "default model not available: " << path;
  expect_scratch_released(*t);
}

}  // namespace
}  // namespace kvasir
