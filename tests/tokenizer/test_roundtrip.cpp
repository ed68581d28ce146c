// Properties on the real vocabularies: decode(encode(s)) == s, and the streaming decoder
// agrees with whole-sequence decode wherever the sequence is cut.
//
// Which vocabularies are lossless, and why (text without special-token strings, parsed with
// parse_special = false):
//  - gpt-2, llama-bpe, qwen2: any bytes at all. Byte-level BPE has a token for each of the 256
//    bytes, so every byte string is spelled somehow.
//  - deepseek-llm: any valid UTF-8. Its byte tokens for C0, C1, F5..FF are user-defined tokens
//    that decode as the Latin-1 character, but those bytes never occur in valid UTF-8.
//  - starcoder, falcon: valid UTF-8 below U+40000 (starcoder lacks byte F1, falcon F2 and some
//    ASCII control bytes; llama.cpp drops such bytes too).
//  - llama-spm, phi-3, stories260K (and Gemma 3): valid UTF-8 without U+2581. SentencePiece
//    writes a space as U+2581, so a literal U+2581 comes back as a space; every other character
//    is a token or spelled with the 256 byte-fallback tokens <0xNN>.
// Not lossless anywhere: special-token parsing (Phi-3 strips the whitespace after its special
// tokens, SentencePiece adds a space after each special token).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace kvasir {
namespace {

const std::vector<std::string> kVocabs = {"llama-spm", "phi-3", "stories260K", "llama-bpe", "qwen2",
                                          "gpt-2", "deepseek-llm", "starcoder", "falcon"};


// Random valid UTF-8 below U+40000 built from pieces that stress tokenizers; with
// `allow_spm_space` it may contain U+2581.
std::string random_text(std::mt19937& rng, bool allow_spm_space = false) {
  static const char* const kPieces[] = {
      "the", "The", " quick", "brown", " fox", "don't", "I'm", "we'll", " ", "  ", "   ", "\t", "\n", "\n\n",
      "\r\n", " \n ", "1", "42", "12345", "3.14", ",", ".", "!", "?", "...", "(", ")", "\"", "'", "-", "_",
      "caf\xC3\xA9", "na\xC3\xAFve", "\xC3\xB1", "\xC3\xBC", "\xC3\x85", "\xE6\x97\xA5\xE6\x9C\xAC",  // 日本
      "\xE4\xB8\xAD\xE6\x96\x87", "\xED\x95\x9C\xEA\xB5\xAD",                                          // 中文 한국
      "\xD0\x9F\xD1\x80\xD0\xB8", "\xD9\x85\xD8\xB1",                                                  // При مر
      "\xF0\x9F\xA6\x99", "\xF0\x9F\x9A\x80", "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB",          // 🦙🚀👩‍💻
      "\xC2\xA0", "\xE3\x80\x80", "\xE2\x80\x83",  // NBSP, ideographic space, em space
      "<", ">", "|", "<tag>", "\xEF\xBF\xBD", "\x7F", "\x01",
  };
  std::uniform_int_distribution<int> count(0, 24), pick(0, int(std::size(kPieces)) - 1), kind(0, 9);
  std::uniform_int_distribution<uint32_t> cp(0x20, 0x3FFFF);
  std::string s;
  const int n = count(rng);
  for (int i = 0; i < n; ++i) {
    if (kind(rng) == 0) {
      uint32_t c = cp(rng);
      if (c >= 0xD800 && c <= 0xDFFF) c = 0x4E2D;  // no surrogates
      if (c == 0x2581 && !allow_spm_space) c = 0x2580;
      tok::utf8_append(s, c);
    } else {
      s += kPieces[pick(rng)];
    }
  }
  return s;
}

class RoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(RoundTrip, DecodeEncodeIsIdentity) {
  KV_REQUIRE_VOCAB(t, GetParam());
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    const std::string s = random_text(rng);
    const auto ids = t->encode(s, {.add_special = false, .parse_special = false});
    ASSERT_EQ(t->decode(ids), s) << GetParam() << " case " << i;
    const auto with_bos = t->encode(s, {.add_special = true, .parse_special = false});
    ASSERT_EQ(t->decode(with_bos, /*skip_special=*/true), s) << GetParam() << " case " << i;
  }
}

// Feeds ids one by one; after every push the output so far must be valid UTF-8 and a prefix of
// the sanitized whole decode, and at the end equal to it.
void check_stream(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special) {
  const std::string whole = tok::utf8_sanitize(t.decode(ids, skip_special));
  StreamDecoder d(t, skip_special);
  std::string got;
  for (size_t k = 0; k < ids.size(); ++k) {
    const std::string part = d.push(ids[k]);
    ASSERT_TRUE(tok::utf8_is_valid(part)) << "after id " << k;
    got += part;
    ASSERT_EQ(whole.compare(0, got.size(), got), 0) << "not a prefix after id " << k;
  }
  got += d.flush();
  ASSERT_EQ(got, whole);
}

TEST_P(RoundTrip, StreamMatchesWholeDecode) {
  KV_REQUIRE_VOCAB(t, GetParam());
  std::mt19937 rng(7);
  for (int i = 0; i < 100; ++i) {
    const std::string s = random_text(rng, /*allow_spm_space=*/true);
    const auto ids = t->encode(s, {.add_special = true, .parse_special = false});
    check_stream(*t, ids, true);
    check_stream(*t, ids, false);
  }
  // Random ids: byte tokens and partial characters in any order, invalid UTF-8 included.
  std::uniform_int_distribution<int32_t> any(0, t->n_vocab() - 1), low(0, std::min(t->n_vocab(), 400) - 1);
  for (int i = 0; i < 100; ++i) {
    std::vector<int32_t> ids(size_t(i % 30));
    for (auto& id : ids) id = (i % 2) ? any(rng) : low(rng);
    check_stream(*t, ids, i % 3 == 0);
  }
}

TEST_P(RoundTrip, StreamSplitAnywhereContinues) {
  // A prefix decoded by one decoder and the rest by a continuation decoder give the whole text
  // (the continuation keeps the leading space of its first token), at every cut that does not
  // fall inside a character.
  KV_REQUIRE_VOCAB(t, GetParam());
  std::mt19937 rng(11);
  for (int i = 0; i < 30; ++i) {
    const std::string s = random_text(rng);
    const auto ids = t->encode(s, {.add_special = true, .parse_special = false});
    for (size_t cut = 0; cut <= ids.size(); ++cut) {
      const std::vector<int32_t> head_ids(ids.begin(), ids.begin() + long(cut));
      if (!tok::utf8_is_valid(t->decode(head_ids, true))) continue;
      const bool had_text =
          std::any_of(head_ids.begin(), head_ids.end(), [&](int32_t id) { return !t->is_special(id); });
      StreamDecoder head(*t, true), tail(*t, true, /*continuation=*/had_text);
      std::string got;
      for (size_t k = 0; k < cut; ++k) got += head.push(ids[k]);
      got += head.flush();
      for (size_t k = cut; k < ids.size(); ++k) got += tail.push(ids[k]);
      got += tail.flush();
      ASSERT_EQ(got, s) << GetParam() << " cut " << cut;
    }
  }
}

class AnyBytes : public ::testing::TestWithParam<std::string> {};

TEST_P(AnyBytes, ArbitraryBytesRoundTrip) {
  KV_REQUIRE_VOCAB(t, GetParam());
  std::mt19937 rng(99);
  std::uniform_int_distribution<int> len(0, 40), byte(0, 255);
  for (int i = 0; i < 200; ++i) {
    std::string s(size_t(len(rng)), '\0');
    for (char& c : s) c = char(byte(rng));
    const auto ids = t->encode(s, {.add_special = false, .parse_special = false});
    ASSERT_EQ(t->decode(ids), s) << GetParam() << " case " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, RoundTrip, ::testing::ValuesIn(kVocabs), [](const auto& info) {
  std::string n = info.param;
  for (char& ch : n)
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

INSTANTIATE_TEST_SUITE_P(ByteLevelVocabularies, AnyBytes, ::testing::Values("gpt-2", "llama-bpe", "qwen2"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace kvasir
