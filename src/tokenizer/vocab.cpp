// Loading tokenizer.ggml.* metadata. Defaults and special-token rules follow llama.cpp's
// llama_vocab::impl::load so that a GGUF file tokenizes the same way in both engines; where
// llama.cpp only warns about bad metadata (an out-of-range id, an unknown token type), we fail
// with an error that names the key.
#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>

#include "tokenizer/vocab.h"

namespace kvasir::tok {

namespace {

using gguf::Value;
using gguf::ValueType;

Error err(const std::string& msg) { return Error{"tokenizer: " + msg}; }

// An integer array's element as int64 (token types may be stored as any integer width).
bool is_integer_type(ValueType t) {
  Value v;
  v.type = t;
  return v.is_integer();
}

// A token id key: absent -> keep `id`; -1 or 0xFFFFFFFF -> none (what converters write for
// "no such token"); anything else must be in range.
Status read_token_id(const gguf::File& f, const char* key, int32_t n_vocab, int32_t& id) {
  const Value* v = f.find(key);
  if (!v) return {};
  if (!v->is_integer()) return err(std::string(key) + " must be an integer, not " + std::string(gguf::value_type_name(v->type)));
  const int64_t x = v->as_i64();
  if (x == -1 || x == int64_t(UINT32_MAX)) {
    id = kNoToken;
    return {};
  }
  if (x < 0 || x >= n_vocab)
    return err(std::string(key) + " = " + std::to_string(x) + " is out of range (the vocabulary has " +
               std::to_string(n_vocab) + " tokens)");
  id = int32_t(x);
  return {};
}

Status read_bool(const gguf::File& f, const char* key, bool& out) {
  const Value* v = f.find(key);
  if (!v) return {};
  if (v->type != ValueType::BOOL) return err(std::string(key) + " must be a bool, not " + std::string(gguf::value_type_name(v->type)));
  out = v->u != 0;
  return {};
}

uint16_t attr_of(TokenType t) {
  switch (t) {
    case TokenType::normal: return kAttrNormal;
    case TokenType::unknown: return kAttrUnknown;
    case TokenType::control: return kAttrControl;
    case TokenType::user_defined: return kAttrUserDefined;
    case TokenType::unused: return kAttrUnused;
    case TokenType::byte: return kAttrByte;
    case TokenType::undefined: return 0;
  }
  return 0;
}

Status read_tokens(const gguf::File& f, Vocab& v) {
  const Value* tokens = f.find("tokenizer.ggml.tokens");
  if (!tokens) return err("missing tokenizer.ggml.tokens");
  if (tokens->type != ValueType::ARRAY || tokens->elem_type != ValueType::STRING)
    return err("tokenizer.ggml.tokens must be an array of strings");
  if (tokens->items.empty()) return err("tokenizer.ggml.tokens is empty");
  if (tokens->items.size() >= size_t(INT32_MAX)) return err("tokenizer.ggml.tokens has too many tokens");
  const size_t n = tokens->items.size();

  v.text.resize(n);
  v.score.assign(n, 0.0f);
  v.type.assign(n, TokenType::normal);
  for (size_t i = 0; i < n; ++i) {
    v.text[i] = tokens->items[i].str;
    // llama.cpp renames empty tokens rather than refusing the file; they can never match text.
    if (v.text[i].empty()) v.text[i] = "[EMPTY_" + std::to_string(i) + "]";
  }

  if (const Value* scores = f.find("tokenizer.ggml.scores")) {
    if (scores->type != ValueType::ARRAY || (scores->elem_type != ValueType::F32 && scores->elem_type != ValueType::I32))
      return err("tokenizer.ggml.scores must be an array of f32 (or i32)");
    if (scores->items.size() != n)
      return err("tokenizer.ggml.scores has " + std::to_string(scores->items.size()) + " entries but there are " +
                 std::to_string(n) + " tokens");
    for (size_t i = 0; i < n; ++i) {
      v.score[i] = float(scores->items[i].as_f64());
      // NaN would make the merge order undefined.
      if (std::isnan(v.score[i])) return err("tokenizer.ggml.scores[" + std::to_string(i) + "] is NaN");
    }
  }

  if (const Value* types = f.find("tokenizer.ggml.token_type")) {
    if (types->type != ValueType::ARRAY || !is_integer_type(types->elem_type))
      return err("tokenizer.ggml.token_type must be an array of integers");
    if (types->items.size() != n)
      return err("tokenizer.ggml.token_type has " + std::to_string(types->items.size()) + " entries but there are " +
                 std::to_string(n) + " tokens");
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = types->items[i].as_i64();
      if (t < 0 || t > 6)
        return err("tokenizer.ggml.token_type[" + std::to_string(i) + "] = " + std::to_string(t) +
                   " is not a token type (0..6)");
      v.type[i] = TokenType(t);
    }
  }
  v.attr.resize(n);
  for (size_t i = 0; i < n; ++i) v.attr[i] = attr_of(v.type[i]);

  v.index.build(v.text);
  for (size_t i = 0; i < n; ++i) {
    if (i + 8 < n) v.index.prefetch(hash_bytes(v.text[i + 8]));  // inserts are cache misses
    const int32_t dup = v.index.insert(int32_t(i));
    if (dup >= 0)
      return err("duplicate token in tokenizer.ggml.tokens: '" + v.text[i] + "' has ids " + std::to_string(dup) +
                 " and " + std::to_string(i));
  }
  return {};
}

Status read_special_ids(const gguf::File& f, Vocab& v, int32_t& fim_pad, int32_t& fim_rep, int32_t& fim_sep) {
  const int32_t n = v.size();
  // Defaults that do not fit this vocabulary are dropped, as llama.cpp does.
  for (int32_t* id : {&v.bos, &v.eos, &v.unk})
    if (*id >= n) *id = kNoToken;
  struct Key {
    const char* name;
    int32_t* id;
  };
  const Key keys[] = {
      {"tokenizer.ggml.bos_token_id", &v.bos},       {"tokenizer.ggml.eos_token_id", &v.eos},
      {"tokenizer.ggml.eot_token_id", &v.eot},       {"tokenizer.ggml.eom_token_id", &v.eom},
      {"tokenizer.ggml.unknown_token_id", &v.unk},   {"tokenizer.ggml.seperator_token_id", &v.sep},
      {"tokenizer.ggml.padding_token_id", &v.pad},   {"tokenizer.ggml.fim_pad_token_id", &fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &fim_rep}, {"tokenizer.ggml.fim_sep_token_id", &fim_sep},
  };
  for (const Key& k : keys)
    if (Status s = read_token_id(f, k.name, n, *k.id); !s) return s;
  return {};
}

int32_t find_any(const Vocab& v, std::initializer_list<const char*> texts) {
  int32_t best = kNoToken;
  for (const char* t : texts) {
    const int32_t id = v.index.find(t);
    if (id >= 0 && (best < 0 || id < best)) best = id;
  }
  return best;
}

// End-of-generation tokens, found by text as llama.cpp does (the metadata rarely lists them).
// Tokens found this way are made control tokens, as llama.cpp does, so that they are parsed as
// special and hidden by skip_special.
void find_eog(Vocab& v, int32_t fim_pad, int32_t fim_rep, int32_t fim_sep) {
  auto mark_control = [&](int32_t id) { v.attr[size_t(id)] |= kAttrControl; };
  if (v.eot == kNoToken) {
    v.eot = find_any(v, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
                         "<EOT>", "_<EOT>", "[EOT]", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                         "<end_of_utterance>"});
    if (v.eot != kNoToken) mark_control(v.eot);
  }
  if (v.eom == kNoToken) {
    v.eom = find_any(v, {"<|eom_id|>"});
    if (v.eom != kNoToken) mark_control(v.eom);
  }
  // FIM padding / repository / file-separator tokens also end generation in code models.
  auto fim = [&](int32_t& id, std::initializer_list<const char*> texts) {
    if (id == kNoToken) {
      id = find_any(v, texts);
      if (id != kNoToken) mark_control(id);
    }
  };
  fim(fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
  fim(fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  fim(fim_sep, {"<|file_sep|>"});

  std::vector<int32_t> eog;
  for (int32_t id : {fim_pad, fim_rep, fim_sep, v.eos, v.eot, v.eom})
    if (id != kNoToken) eog.push_back(id);
  static const char* const kEogTexts[] = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
      "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
      "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
      "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[",
  };
  for (const char* t : kEogTexts) {
    const int32_t id = v.index.find(t);
    if (id < 0) continue;
    eog.push_back(id);
    mark_control(id);
  }
  // gpt-oss renders these as text.
  for (const char* t : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
    if (int32_t id = v.index.find(t); id >= 0) v.attr[size_t(id)] = kAttrUserDefined;

  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  auto has_text = [&](const char* t) {
    const int32_t id = v.index.find(t);
    return id >= 0 && std::binary_search(eog.begin(), eog.end(), id);
  };
  auto drop = [&](const char* t, uint16_t new_attr) {
    const int32_t id = v.index.find(t);
    eog.erase(std::remove(eog.begin(), eog.end(), id), eog.end());
    v.attr[size_t(id)] = new_attr;
  };
  // Harmony-style vocabularies end a message with <|end|> but keep generating after it.
  if (has_text("<|end|>") && ((has_text("<|return|>") && has_text("<|call|>")) ||
                              (has_text("<|calls|>") && has_text("<|flush|>"))))
    drop("<|end|>", kAttrUserDefined);
  if (has_text("<|tool_response>") && has_text("</s>")) drop("</s>", kAttrNormal);
  v.eog = std::move(eog);
}

// llama.cpp strips the whitespace after Phi-3's special tokens, chosen by the model's name.
Status apply_strip_rules(const gguf::File& f, Vocab& v) {
  const Value* name = f.find("general.name");
  if (!name || name->type != ValueType::STRING) return {};
  std::string lower = name->str;
  for (char& c : lower) c = char(std::tolower(uint8_t(c)));
  if (lower.find("phi-3") == std::string::npos && lower.find("phi3") == std::string::npos) return {};
  for (int32_t id = 0; id < v.size(); ++id)
    if (v.has(id, kAttrControl | kAttrUserDefined | kAttrUnknown)) v.attr[size_t(id)] |= kAttrRstrip;
  if (int32_t id = v.index.find("</s>"); id >= 0) v.attr[size_t(id)] |= kAttrRstrip;
  for (const char* t : {"<unk>", "<s>", "<|endoftext|>"})
    if (int32_t id = v.index.find(t); id >= 0) v.attr[size_t(id)] &= uint16_t(~kAttrRstrip);
  return {};
}

}  // namespace

PreKind pre_kind_from_name(const std::string& name, bool* llama3_family) {
  auto in = [&](std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [&](const char* n) { return name == n; });
  };
  if (llama3_family) *llama3_family = false;
  if (in({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"})) {
    if (llama3_family) *llama3_family = true;
    return PreKind::llama3;
  }
  if (in({"dbrx", "smaug-bpe"})) return PreKind::llama3;  // same regex, no llama3 defaults
  if (in({"gpt-2", "phi-2", "mpt", "olmo", "jais", "jina-es", "jina-de", "jina-v1-en", "jina-v2-es", "jina-v2-de",
          "jina-v2-code", "roberta-bpe", "gigachat", "exaone4", "trillion", "granite-docling"}))
    return PreKind::gpt2;
  if (in({"qwen2", "deepseek-r1-qwen", "stablelm2", "megrez", "hunyuan", "kormo"})) return PreKind::qwen2;
  if (in({"deepseek-llm"})) return PreKind::deepseek_llm;
  if (in({"deepseek-coder"})) return PreKind::deepseek_coder;
  if (in({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"})) return PreKind::starcoder;
  if (in({"falcon"})) return PreKind::falcon;
  return PreKind::default_;
}

Status load_vocab(const gguf::File& f, Vocab& v) {
  const Value* model = f.find("tokenizer.ggml.model");
  if (!model) return err("missing tokenizer.ggml.model (the file has no vocabulary)");
  if (model->type != ValueType::STRING) return err("tokenizer.ggml.model must be a string");
  v.model = model->str;
  if (v.model == "llama") {
    v.kind = VocabKind::spm;
  } else if (v.model == "gpt2") {
    v.kind = VocabKind::bpe;
  } else {
    return err("tokenizer model '" + v.model +
               "' is not supported (supported: 'llama' = SentencePiece, 'gpt2' = byte-level BPE)");
  }
  if (const Value* pre = f.find("tokenizer.ggml.pre")) {
    if (pre->type != ValueType::STRING) return err("tokenizer.ggml.pre must be a string");
    v.pre_name = pre->str;
  }

  if (Status s = read_tokens(f, v); !s) return s;

  bool llama3_family = false;
  if (v.kind == VocabKind::spm) {
    v.bos = 1, v.eos = 2, v.unk = 0;
    v.add_space_prefix = true;
    v.add_bos = true;
    v.pre = PreKind::default_;
  } else {
    v.bos = 11, v.eos = 11;  // llama.cpp's BPE defaults (Falcon); real files set them
    v.pre = pre_kind_from_name(v.pre_name, &llama3_family);
    v.add_bos = llama3_family;
    v.ignore_merges = llama3_family;
    if (!f.find("tokenizer.ggml.merges")) return err("missing tokenizer.ggml.merges (required for a 'gpt2' vocabulary)");
    const Value* merges = f.find("tokenizer.ggml.merges");
    if (merges->type != ValueType::ARRAY || merges->elem_type != ValueType::STRING)
      return err("tokenizer.ggml.merges must be an array of strings");
  }
  if (Status s = read_bool(f, "tokenizer.ggml.add_space_prefix", v.add_space_prefix); !s) return s;

  int32_t fim_pad = kNoToken, fim_rep = kNoToken, fim_sep = kNoToken;
  if (Status s = read_special_ids(f, v, fim_pad, fim_rep, fim_sep); !s) return s;
  if (Status s = read_bool(f, "tokenizer.ggml.add_bos_token", v.add_bos); !s) return s;
  if (Status s = read_bool(f, "tokenizer.ggml.add_eos_token", v.add_eos); !s) return s;
  if (v.add_bos && v.bos == kNoToken) return err("tokenizer.ggml.add_bos_token is true but there is no BOS token");
  if (v.add_eos && v.eos == kNoToken) return err("tokenizer.ggml.add_eos_token is true but there is no EOS token");

  find_eog(v, fim_pad, fim_rep, fim_sep);
  return apply_strip_rules(f, v);
}

}  // namespace kvasir::tok
