// libFuzzer target: the grammar front ends and the matcher on arbitrary input. The first byte
// picks the front end (GBNF text, a JSON Schema, a regex pattern); whatever compiles is then run
// by a matcher over a small vocabulary (masks, accepts, the input's own bytes as text). Every
// failure must come back as an Error; the grammar limits keep each input to milliseconds.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex_gbnf.h"

namespace {

std::shared_ptr<const kvasir::grammar::TokenIndex> vocab() {
  static const auto v = std::make_shared<kvasir::grammar::TokenIndex>(std::vector<std::string>{
      "", "{", "}", "[", "]", ",", ":", " ", "\n", "\"", "\\", "a", "b", "ab", "\"a", "a\"", "1", "0", "-", ".", "e",
      "true", "false", "null", "\xC3", "\xA9", "\xC3\xA9", "\xE2\x82", "\xAC", "\xFF", "\x80", "x", "\\n", "\"}",
      "\",", "\":", "{\"", "aaaa", "2", "E", "+"});
  return v;
}

void run(kvasir::grammar::Grammar g, std::string_view text) {
  auto compiled = kvasir::grammar::compile(std::move(g), vocab());
  kvasir::grammar::Matcher m(compiled);
  (void)m.accept_bytes(text.substr(0, 64));
  for (int step = 0; step < 24; ++step) {
    auto mask = m.mask();
    int32_t pick = -1;
    for (size_t t = 0; t < vocab()->size(); ++t)
      if ((mask[t / 64] >> (t % 64)) & 1) pick = int32_t(t);
    if (pick < 0) break;
    if (!m.accept(pick)) __builtin_trap();  // the mask allowed it
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0:
      if (auto g = kvasir::grammar::parse_gbnf(text)) run(std::move(*g), text);
      break;
    case 1: {
      auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
      if (schema.is_discarded()) break;
      if (auto g = kvasir::grammar::compile_json_schema(schema)) run(std::move(*g), text);
      break;
    }
    default:
      if (auto body = kvasir::grammar::regex_to_gbnf(text))
        if (auto g = kvasir::grammar::parse_gbnf("root ::= " + *body + "\n")) run(std::move(*g), text);
      break;
  }
  return 0;
}
