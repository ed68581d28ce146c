// The vocabulary as GGUF metadata describes it (tokenizer.ggml.*), validated, with the defaults
// and special-token rules of llama.cpp (src/llama-vocab.cpp) so that token ids match it exactly.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "format/gguf.h"
#include "tokenizer/string_index.h"

namespace kvasir::tok {

// tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6,
};

// Token attributes (a token type plus llama.cpp's per-model strip rules).
enum TokenAttr : uint16_t {
  kAttrNormal = 1 << 0,
  kAttrUnknown = 1 << 1,
  kAttrControl = 1 << 2,
  kAttrUserDefined = 1 << 3,
  kAttrUnused = 1 << 4,
  kAttrByte = 1 << 5,
  kAttrLstrip = 1 << 6,  // a special-token match eats the whitespace before it
  kAttrRstrip = 1 << 7,  // ... and after it
};
inline constexpr uint16_t kAttrSpecial = kAttrControl | kAttrUnknown;  // hidden by skip_special

enum class VocabKind { spm, bpe };  // tokenizer.ggml.model "llama" / "gpt2"

// How byte-level BPE splits text into words before merging (from tokenizer.ggml.pre).
enum class PreKind { default_, gpt2, llama3, qwen2, deepseek_llm, deepseek_coder, starcoder, falcon };

inline constexpr int32_t kNoToken = -1;

struct Vocab {
  VocabKind kind = VocabKind::spm;
  std::string model;     // tokenizer.ggml.model
  std::string pre_name;  // tokenizer.ggml.pre as written ("" when absent)
  PreKind pre = PreKind::default_;

  std::vector<std::string> text;  // id -> token text as stored (SPM: U+2581 for spaces; BPE: byte-mapped)
  std::vector<float> score;       // SPM merge priority; 0 when absent
  std::vector<TokenType> type;
  std::vector<uint16_t> attr;
  StringIndex index;  // text -> id (over all tokens, as llama.cpp's token_to_id)

  int32_t bos = kNoToken, eos = kNoToken, eot = kNoToken, eom = kNoToken;
  int32_t unk = kNoToken, pad = kNoToken, sep = kNoToken;
  std::vector<int32_t> eog;  // sorted: eos, eot, eom and the end-of-turn tokens found by text

  bool add_bos = false, add_eos = false;
  bool add_space_prefix = false;  // SPM: prepend a space to text at the start / after a special token
  bool ignore_merges = false;     // BPE (llama3): a word that is a whole token skips the merges

  int32_t size() const { return int32_t(text.size()); }
  bool valid(int32_t id) const { return id >= 0 && id < size(); }
  bool has(int32_t id, uint16_t a) const { return (attr[size_t(id)] & a) != 0; }
};

// Reads and checks every tokenizer.ggml.* key. `out` must not move afterwards (its index points
// at out.text).
Status load_vocab(const gguf::File& file, Vocab& out);

// The pre-tokenizer for a tokenizer.ggml.pre name; unknown or empty names use llama.cpp's
// "default" pre-tokenizer (what llama.cpp does for a missing name).
PreKind pre_kind_from_name(const std::string& name, bool* llama3_family = nullptr);

}  // namespace kvasir::tok
