#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenize.h"

#include <pcre2.h>

#include <string>

namespace kvasir::tok {

namespace {

// \s as llama.cpp sees it: the Unicode White_Space set. (PCRE2's \s in UCP mode leaves out
// U+0085, and llama.cpp maps every non-ASCII space to a space before its std::regex runs.)
#define KV_WS "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

// GPT-2's split, plus the trailing \s+ that llama.cpp's hand-written matcher applies.
const char* const kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" KV_WS "\\p{L}\\p{N}]+|[" KV_WS "]+(?![^" KV_WS "])|[" KV_WS "]+";

// Llama 3 (tiktoken cl100k style): case-insensitive contractions, digits in threes.
const char* const kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^" KV_WS "\\p{L}\\p{N}]+[\\r\\n]*|[" KV_WS "]*[\\r\\n]+|[" KV_WS "]+(?![^" KV_WS "])|[" KV_WS "]+";

// Qwen2: as Llama 3 but single digits.
const char* const kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^" KV_WS "\\p{L}\\p{N}]+[\\r\\n]*|[" KV_WS "]*[\\r\\n]+|[" KV_WS "]+(?![^" KV_WS "])|[" KV_WS "]+";

// DeepSeek's cased-letter class (from its tokenizer.json), written as code points because
// several of them have identical-looking twins in other blocks.
const char* const kDeepseekLetters =
    "[" KV_WS "]?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"
    "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}"
    "\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}"
    "\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"
    "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}"
    "\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}"
    "\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}"
    "\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}"
    "\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}"
    "\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}"
    "\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
    "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}"
    "\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}]+";

// DeepSeek's punctuation class. Its U+3000 is left out: llama.cpp turns non-ASCII spaces into
// a vertical tab before matching, so U+3000 only ever matches the leading \s?.
const char* const kDeepseekPunct =
    "[" KV_WS "]?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3001}\\x{3002}]+";

// CJK runs: U+4E00-U+9FA5, U+0800-U+4E00, U+AC00-U+D7FF, minus the spaces inside those ranges
// (same reason as above).
const char* const kDeepseekCjk =
    "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{167F}\\x{1681}-\\x{1FFF}\\x{200B}-\\x{2027}\\x{202A}-\\x{202E}"
    "\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}\\x{3001}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+";

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

std::vector<std::string> PreTokenizer::patterns(PreKind kind) {
  switch (kind) {
    case PreKind::gpt2: return {kGpt2};
    case PreKind::llama3: return {kLlama3};
    case PreKind::qwen2: return {kQwen2};
    case PreKind::starcoder: return {"\\p{N}", kGpt2};
    case PreKind::falcon: return {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"};
    case PreKind::deepseek_llm:
      return {"[\\r\\n]", kDeepseekLetters, kDeepseekPunct, "[" KV_WS "]+\\z", kDeepseekCjk, "\\p{N}+"};
    case PreKind::deepseek_coder:
      return {"[\\r\\n]", "[" KV_WS "]?\\p{L}+", "[" KV_WS "]?\\p{P}+", kDeepseekCjk, "\\p{N}"};
    case PreKind::default_: break;
  }
  return {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"};
}

Status PreTokenizer::build(PreKind kind) {
  regexes_.clear();
  for (const std::string& p : patterns(kind)) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    auto re = std::make_unique<Regex>();
    // MATCH_INVALID_UTF: arbitrary bytes are legal subjects; invalid sequences just never match.
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &offset, nullptr);
    if (!re->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(code, msg, sizeof msg);
      return Error{"tokenizer: pre-tokenizer regex does not compile at offset " + std::to_string(offset) + ": " +
                   reinterpret_cast<const char*>(msg)};
    }
    // Without JIT support (or if it fails) the interpreter runs.
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    regexes_.push_back(std::move(re));
  }
  return {};
}

namespace {

// Match-data and (on demand) a big JIT stack for one split call.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ~MatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

// pcre2_jit_match skips pcre2_match's per-call checks, which cost as much as matching a word.
int match(const pcre2_code* code, bool jit, PCRE2_SPTR subject, size_t len, size_t start, MatchState& st) {
  return jit ? pcre2_jit_match(code, subject, len, start, 0, st.data, st.context)
             : pcre2_match(code, subject, len, start, 0, st.data, st.context);
}

// Runs one regex over text[piece], appending matches and the gaps between them to `out`.
void split_piece(const pcre2_code* code, bool jit, std::string_view text, Span piece, MatchState& st,
                 std::vector<Span>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + piece.begin);
  const size_t len = piece.end - piece.begin;
  size_t start = 0, gap = 0;
  while (start < len) {
    int rc = match(code, jit, subject, len, start, st);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !st.stack) {
      // Deep backtracking on a long run: retry once with a larger JIT stack.
      st.stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
      st.context = pcre2_match_context_create(nullptr);
      pcre2_jit_stack_assign(st.context, nullptr, st.stack);
      rc = match(code, jit, subject, len, start, st);
    }
    if (rc < 0) break;  // no match (or a resource error): the rest stays one piece
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t ms = ov[0], me = ov[1];
    if (me <= ms) {  // empty match: it contributes no word; step over one character
      start = ms + 1;
      while (start < len && (uint8_t(subject[start]) & 0xC0) == 0x80) ++start;
      continue;
    }
    if (ms > gap) out.push_back({piece.begin + gap, piece.begin + ms});
    out.push_back({piece.begin + ms, piece.begin + me});
    gap = start = me;
  }
  if (gap < len) out.push_back({piece.begin + gap, piece.end});
}

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<Span>& words) const {
  words.clear();
  if (text.empty()) return;
  MatchState st;
  st.data = pcre2_match_data_create(1, nullptr);
  words.push_back({0, text.size()});
  std::vector<Span> next;
  for (const auto& re : regexes_) {
    next.clear();
    next.reserve(words.size() * 2);
    for (const Span& piece : words) split_piece(re->code, re->jit, text, piece, st, next);
    words.swap(next);
  }
}

}  // namespace kvasir::tok
