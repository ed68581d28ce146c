// Tokenizer::max_piece_bytes: no token of encode() stands for more input bytes than it, so a text
// of B bytes gives at least ceil(B / max_piece_bytes) tokens (the server rejects over-long text
// prompts with that before tokenizing them). Checked on every real vocabulary with adversarial
// texts: runs of one character, token texts and pieces glued together, special-token strings.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <random>

#include "tokenizer_test_util.h"

namespace kvasir {
namespace {

const std::vector<std::string> kVocabs = {"llama-spm", "phi-3", "stories260K", "llama-bpe", "qwen2",
                                          "gpt-2", "deepseek-llm", "starcoder", "falcon"};

size_t longest_piece(const Tokenizer& t) {
  size_t most = 0;
  for (int32_t id = 0; id < t.n_vocab(); ++id) most = std::max(most, t.piece(id).size());
  return most;
}

// The texts the bound is checked on.
std::vector<std::string> adversarial_texts(const Tokenizer& t) {
  std::vector<std::string> texts;
  // Runs of one character, around the lengths of whitespace and punctuation tokens.
  for (const char* c : {"a", " ", "\n", "\t", "-", "=", "0", ".", "*", "\xE2\x96\x81" /* U+2581 */, "\xC3\xA9", "\xFF"})
    for (size_t n : {1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 64, 100, 257, 1000, 4097}) {
      std::string s;
      for (size_t k = 0; k < n; ++k) s += c;
      texts.push_back(s);
    }
  // The longest token texts and pieces, alone and repeated.
  std::vector<int32_t> ids(size_t(t.n_vocab()));
  for (int32_t id = 0; id < t.n_vocab(); ++id) ids[size_t(id)] = id;
  for (bool by_text : {true, false}) {
    auto len = [&](int32_t id) { return by_text ? t.token_text(id).size() : t.piece(id).size(); };
    std::partial_sort(ids.begin(), ids.begin() + std::min<ptrdiff_t>(64, ssize(ids)), ids.end(),
                      [&](int32_t a, int32_t b) { return len(a) > len(b); });
    for (size_t k = 0; k < std::min<size_t>(64, ids.size()); ++k) {
      const std::string s = by_text ? t.token_text(ids[k]) : t.piece(ids[k]);
      texts.push_back(s);
      texts.push_back(s + s + s);
    }
  }
  // Every special and user-defined token string, glued together and separated by spaces.
  std::string glued, spaced;
  for (int32_t id = 0; id < t.n_vocab(); ++id) {
    if (t.token_text(id).empty() || (!t.is_special(id) && t.piece(id) != t.token_text(id))) continue;
    glued += t.token_text(id);
    spaced += t.token_text(id) + "  ";
    if (glued.size() > (size_t(1) << 18)) break;
  }
  texts.push_back(glued);
  texts.push_back(spaced);
  // Random token texts and pieces glued together, and random bytes.
  std::mt19937 rng(2024);
  std::uniform_int_distribution<int32_t> any(0, t.n_vocab() - 1);
  std::uniform_int_distribution<int> count(1, 40), byte(0, 255);
  for (int i = 0; i < 300; ++i) {
    std::string s;
    for (int k = count(rng); k > 0; --k) {
      const int32_t id = any(rng);
      s += (i % 3 == 0) ? t.piece(id) : t.token_text(id);
      if (i % 5 == 0) s += ' ';
    }
    texts.push_back(s);
    std::string bytes(size_t(count(rng)), '\0');
    for (char& c : bytes) c = char(byte(rng));
    texts.push_back(bytes);
  }
  return texts;
}

void expect_bound_holds(const Tokenizer& t, const std::string& name) {
  const int32_t m = t.max_piece_bytes();
  for (const std::string& s : adversarial_texts(t)) {
    const size_t least = (s.size() + size_t(m) - 1) / size_t(m);
    for (bool parse : {true, false}) {
      const size_t n = t.encode(s, {.add_special = false, .parse_special = parse}).size();
      ASSERT_GE(n, least) << name << ": " << s.size() << " bytes, parse_special " << parse << ", text: "
                          << s.substr(0, 200);
    }
  }
}

class PieceBound : public ::testing::TestWithParam<std::string> {};

TEST_P(PieceBound, AtLeastTheLongestPiece) {
  KV_REQUIRE_VOCAB(t, GetParam());
  EXPECT_GE(t->max_piece_bytes(), 1);
  EXPECT_GE(size_t(t->max_piece_bytes()), longest_piece(*t));
  if (t->kind() == TokenizerKind::spm && t->max_piece_bytes() != INT32_MAX) {
    for (int32_t id = 0; id < t->n_vocab(); ++id)
      ASSERT_GE(size_t(t->max_piece_bytes()), t->token_text(id).size()) << "SPM token " << id;
  }
}

TEST_P(PieceBound, TextGivesAtLeastBytesOverMaxPiece) {
  KV_REQUIRE_VOCAB(t, GetParam());
  const int32_t m = t->max_piece_bytes();
  if (m == INT32_MAX) GTEST_SKIP() << GetParam() << " has no bound";
  expect_bound_holds(*t, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, PieceBound, ::testing::ValuesIn(kVocabs), [](const auto& info) {
  std::string n = info.param;
  for (char& ch : n)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

// The default model (Gemma 3: SentencePiece, 262k tokens, long whitespace tokens), when `make`
// has fetched it.
TEST(PieceBound, DefaultModel) {
  const std::string path = std::string(KVASIR_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
  const Tokenizer* t = test::load_tokenizer_file(path);
  if (!t) GTEST_SKIP() << "default model not available: " << path;
  ASSERT_NE(t->max_piece_bytes(), INT32_MAX);
  expect_bound_holds(*t, "gemma-3");
}

TEST(PieceBound, KnownValues) {
  // Byte-level BPE: exactly the longest piece (each mapped character is one input byte).
  for (const char* name : {"llama-bpe", "gpt-2", "qwen2"}) {
    if (const Tokenizer* t = test::load_vocab(name)) {
      EXPECT_EQ(size_t(t->max_piece_bytes()), longest_piece(*t)) << name;
    }
  }
  // Phi-3 strips the whitespace after its special tokens: any number of spaces can vanish.
  if (const Tokenizer* t = test::load_vocab("phi-3")) {
    EXPECT_EQ(t->max_piece_bytes(), INT32_MAX);
    EXPECT_EQ(t->encode("<|end|>" + std::string(1000, ' ') + "x", {.add_special = false}).size(), 2u);
  }
  // StarCoder has no token for byte F1 (nor Falcon for F2): such bytes give no tokens at all.
  if (const Tokenizer* t = test::load_vocab("starcoder")) {
    EXPECT_EQ(t->max_piece_bytes(), INT32_MAX);
    EXPECT_TRUE(t->encode(std::string(100, '\xF1'), {.add_special = false}).empty());
  }
  // SentencePiece: the longest token text (16 x U+2581), longer than any piece (27 bytes).
  if (const Tokenizer* t = test::load_vocab("llama-spm")) EXPECT_EQ(t->max_piece_bytes(), 48);
}

TEST(PieceBound, SpmLiteralSpaceSymbolBeatsTheLongestPiece) {
  // Why SPM's bound is the longest token text, not the longest piece: a literal U+2581 in the
  // input (3 bytes) is matched by a token whose piece shows it as a 1-byte space.
  KV_REQUIRE_VOCAB(t, "llama-spm");
  const size_t naive = longest_piece(*t);
  bool beaten = false;
  std::string s;
  for (int n = 1; n <= 64 && !beaten; ++n) {
    s += "\xE2\x96\x81";
    beaten = t->encode(s, {.add_special = false}).size() < (s.size() + naive - 1) / naive;
  }
  EXPECT_TRUE(beaten);
}

}  // namespace
}  // namespace kvasir
