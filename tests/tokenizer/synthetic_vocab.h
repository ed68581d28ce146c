// Small hand-made vocabularies written with gguf::Writer, for rules and error paths that the
// real vocabularies do not isolate.
#pragma once
#include <string>
#include <vector>

#include "format/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace kvasir::test {

struct SyntheticVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;  // empty: all normal
  std::vector<float> scores;   // empty: none
  gguf::Writer writer;

  // SPM: <unk> <s> </s>, the 256 byte tokens, then `extra` as normal tokens (scores = -index).
  static SyntheticVocab spm(const std::vector<std::string>& extra) {
    SyntheticVocab v;
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      v.tokens.push_back(buf);
      v.types.push_back(6);
    }
    for (const auto& e : extra) {
      v.tokens.push_back(e);
      v.types.push_back(1);
    }
    for (size_t i = 0; i < v.tokens.size(); ++i) v.scores.push_back(-float(i));
    v.writer.set("tokenizer.ggml.model", gguf::Value::of_string("llama"));
    return v;
  }

  // Byte-level BPE: the 256 byte characters, then `extra` tokens; `merges` as given.
  static SyntheticVocab bpe(const std::vector<std::string>& extra, const std::vector<std::string>& merges) {
    SyntheticVocab v;
    for (int b = 0; b < 256; ++b) {
      std::string s;
      tok::utf8_append(s, tok::gpt2_byte_to_codepoint(uint8_t(b)));
      v.tokens.push_back(s);
    }
    for (const auto& e : extra) v.tokens.push_back(e);
    v.types.assign(v.tokens.size(), 1);
    v.writer.set("tokenizer.ggml.model", gguf::Value::of_string("gpt2"));
    std::vector<gguf::Value> m;
    for (const auto& s : merges) m.push_back(gguf::Value::of_string(s));
    v.writer.set("tokenizer.ggml.merges", gguf::Value::of_array(gguf::ValueType::STRING, m));
    return v;
  }

  int32_t id(const std::string& text) const {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == text) return int32_t(i);
    return -1;
  }

  // Writes tokens / types / scores (unless `skip` names one of them) and parses the result.
  Result<gguf::File> file(const std::string& skip = "") {
    std::vector<gguf::Value> t, ty, sc;
    for (const auto& s : tokens) t.push_back(gguf::Value::of_string(s));
    for (int32_t x : types) ty.push_back(gguf::Value::of_i32(x));
    for (float x : scores) sc.push_back(gguf::Value::of_f32(x));
    if (skip != "tokens") writer.set("tokenizer.ggml.tokens", gguf::Value::of_array(gguf::ValueType::STRING, t));
    if (skip != "types" && !ty.empty())
      writer.set("tokenizer.ggml.token_type", gguf::Value::of_array(gguf::ValueType::I32, ty));
    if (skip != "scores" && !sc.empty())
      writer.set("tokenizer.ggml.scores", gguf::Value::of_array(gguf::ValueType::F32, sc));
    bytes_ = writer.to_bytes();
    return gguf::parse(bytes_);
  }

  Result<Tokenizer> tokenizer(const std::string& skip = "") {
    auto f = file(skip);
    if (!f) return Error{f.error()};
    return Tokenizer::from_gguf(*f);
  }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace kvasir::test
