// libFuzzer target for the tokenizers: arbitrary bytes are encoded with and without special
// tokens and BOS, every id must be in range, decode must give the text back where the
// vocabulary is lossless, and the streaming decoder must agree with whole decode. The input is
// also read as token ids to exercise decoding of arbitrary sequences.
//
// Vocabularies: $KVASIR_FUZZ_VOCAB (GGUF paths separated by ':'), else
// ../shared/models/vocab/ggml-vocab-llama-bpe.gguf and ../shared/models/stories260K.gguf
// (relative to the working directory, the repository root under `make fuzz`), else two small
// built-in vocabularies so the target still runs without ../shared.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/mapped_file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using kvasir::Tokenizer;

struct Vocab {
  std::string name;
  std::unique_ptr<Tokenizer> tok;
  bool lossless_bytes = false;  // every byte string round-trips (byte-level BPE with 256 byte tokens)
  bool lossless_utf8 = false;   // valid UTF-8 without U+2581 round-trips (SPM with byte fallback)
};

std::vector<Vocab>* g_vocabs = nullptr;

void check(bool ok, const char* what, const Vocab& v) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_tokenizer: %s failed for %s\n", what, v.name.c_str());
  std::abort();
}

void classify(Vocab& v) {
  const Tokenizer& t = *v.tok;
  bool all_bytes = true;
  for (int b = 0; b < 256 && all_bytes; ++b) {
    std::string text;
    if (t.kind() == kvasir::TokenizerKind::bpe) {
      kvasir::tok::utf8_append(text, kvasir::tok::gpt2_byte_to_codepoint(uint8_t(b)));
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "<0x%02X>", b);
      text = hex;
    }
    const int32_t id = t.token_to_id(text);
    all_bytes = id >= 0 && t.piece(id) == std::string(1, char(b));
  }
  v.lossless_bytes = all_bytes && t.kind() == kvasir::TokenizerKind::bpe;
  v.lossless_utf8 = all_bytes && t.kind() == kvasir::TokenizerKind::spm;
}

bool add_file(const std::string& path) {
  auto file = kvasir::MappedFile::open(path);
  if (!file) return false;
  auto g = kvasir::gguf::parse(file->bytes());
  if (!g) return false;
  auto t = Tokenizer::from_gguf(*g);
  if (!t) {
    std::fprintf(stderr, "fuzz_tokenizer: %s: %s\n", path.c_str(), t.error().c_str());
    return false;
  }
  Vocab v{path, std::make_unique<Tokenizer>(std::move(t).value())};
  classify(v);
  g_vocabs->push_back(std::move(v));
  return true;
}

// Fallbacks: byte-level BPE over the 256 byte characters with a few merges, and an SPM vocabulary
// with byte fallback and a few pieces.
void add_builtin() {
  using kvasir::gguf::Value;
  using kvasir::gguf::ValueType;
  std::vector<uint8_t> bytes[2];
  for (int kind = 0; kind < 2; ++kind) {
    kvasir::gguf::Writer w;
    std::vector<Value> tokens, types;
    if (kind == 0) {
      for (int b = 0; b < 256; ++b) {
        std::string s;
        kvasir::tok::utf8_append(s, kvasir::tok::gpt2_byte_to_codepoint(uint8_t(b)));
        tokens.push_back(Value::of_string(s));
      }
      for (const char* s : {"th", "the", "\xC4\xA0the", "in", "<|end|>"}) tokens.push_back(Value::of_string(s));
      std::vector<Value> merges;
      for (const char* m : {"t h", "th e", "\xC4\xA0 the", "i n"}) merges.push_back(Value::of_string(m));
      w.set("tokenizer.ggml.model", Value::of_string("gpt2"));
      w.set("tokenizer.ggml.pre", Value::of_string("llama-bpe"));
      w.set("tokenizer.ggml.merges", Value::of_array(ValueType::STRING, merges));
      w.set("tokenizer.ggml.bos_token_id", Value::of_u32(uint32_t(tokens.size() - 1)));
      for (size_t i = 0; i < tokens.size(); ++i) types.push_back(Value::of_i32(i + 1 == tokens.size() ? 3 : 1));
    } else {
      for (const char* s : {"<unk>", "<s>", "</s>"}) tokens.push_back(Value::of_string(s));
      for (int b = 0; b < 256; ++b) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "<0x%02X>", b);
        tokens.push_back(Value::of_string(hex));
      }
      for (const char* s : {"\xE2\x96\x81", "\xE2\x96\x81t", "th", "\xE2\x96\x81th", "e", "h", "t"})
        tokens.push_back(Value::of_string(s));
      std::vector<Value> scores;
      for (size_t i = 0; i < tokens.size(); ++i) {
        types.push_back(Value::of_i32(i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1));
        scores.push_back(Value::of_f32(-float(i)));
      }
      w.set("tokenizer.ggml.model", Value::of_string("llama"));
      w.set("tokenizer.ggml.scores", Value::of_array(ValueType::F32, scores));
    }
    w.set("tokenizer.ggml.tokens", Value::of_array(ValueType::STRING, tokens));
    w.set("tokenizer.ggml.token_type", Value::of_array(ValueType::I32, types));
    bytes[kind] = w.to_bytes();
    auto g = kvasir::gguf::parse(bytes[kind]);
    if (!g) continue;
    auto t = Tokenizer::from_gguf(*g);
    if (!t) {
      std::fprintf(stderr, "fuzz_tokenizer: built-in vocabulary: %s\n", t.error().c_str());
      std::abort();
    }
    Vocab v{kind == 0 ? "built-in BPE" : "built-in SPM", std::make_unique<Tokenizer>(std::move(t).value())};
    classify(v);
    g_vocabs->push_back(std::move(v));
  }
}

void load_vocabs() {
  g_vocabs = new std::vector<Vocab>();
  std::vector<std::string> paths;
  if (const char* env = std::getenv("KVASIR_FUZZ_VOCAB"); env && *env) {
    std::string list = env;
    for (size_t p = 0; p <= list.size();) {
      size_t e = list.find(':', p);
      if (e == std::string::npos) e = list.size();
      if (e > p) paths.push_back(list.substr(p, e - p));
      p = e + 1;
    }
  } else {
    paths = {"../shared/models/vocab/ggml-vocab-llama-bpe.gguf", "../shared/models/stories260K.gguf"};
  }
  for (const std::string& p : paths)
    if (!add_file(p)) std::fprintf(stderr, "fuzz_tokenizer: cannot load %s\n", p.c_str());
  if (g_vocabs->empty()) {
    std::fprintf(stderr, "fuzz_tokenizer: using the built-in vocabularies\n");
    add_builtin();
  }
}

void check_stream(const Vocab& v, const std::vector<int32_t>& ids, bool skip_special) {
  const std::string whole = kvasir::tok::utf8_sanitize(v.tok->decode(ids, skip_special));
  kvasir::StreamDecoder d(*v.tok, skip_special);
  std::string got;
  for (int32_t id : ids) {
    const std::string part = d.push(id);
    check(kvasir::tok::utf8_is_valid(part), "stream emits valid UTF-8", v);
    got += part;
    check(whole.compare(0, got.size(), got) == 0, "stream output is a prefix of decode", v);
  }
  got += d.flush();
  check(got == whole, "stream == decode", v);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!g_vocabs) load_vocabs();
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const Vocab& v : *g_vocabs) {
    const Tokenizer& t = *v.tok;
    const auto plain = t.encode(text, {.add_special = false, .parse_special = false});
    const auto special = t.encode(text, {.add_special = true, .parse_special = true});
    for (int32_t id : plain) check(t.valid_id(id), "ids in range", v);
    for (int32_t id : special) check(t.valid_id(id), "ids in range", v);
    // No token stands for more input bytes than max_piece_bytes (the server's early length check).
    const size_t least = (size + size_t(t.max_piece_bytes()) - 1) / size_t(t.max_piece_bytes());
    check(plain.size() >= least && special.size() >= least, "tokens >= ceil(bytes / max_piece_bytes)", v);

    const std::string back = t.decode(plain);
    if (v.lossless_bytes) check(back == text, "decode(encode(bytes)) == bytes", v);
    if (v.lossless_utf8 && kvasir::tok::utf8_is_valid(text) && text.find("\xE2\x96\x81") == std::string::npos)
      check(back == text, "decode(encode(utf8)) == utf8", v);

    check_stream(v, plain, false);
    check_stream(v, special, true);

    // The input as token ids (modulo the vocabulary): arbitrary sequences must decode and stream.
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 2 <= size && ids.size() < 512; i += 2) {
      const int32_t raw = int32_t(data[i]) | (int32_t(data[i + 1]) << 8);
      ids.push_back(raw % t.n_vocab());
    }
    check_stream(v, ids, size % 2 == 0);
  }
  return 0;
}
