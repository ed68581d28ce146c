// Structured output cost on a real vocabulary: token-index build, schema compile, and the time of
// every token mask while a JSON document is generated, per request from cold (each request has
// its own matcher, so nothing is reused between documents but the shared star tables).
//
//   grammar_bench [MODEL.gguf] [--docs N]
//
// Two walks: a realistic document (the model's own tokenization of JSON that fits the schema,
// fed token by token) and random walks (a seeded random allowed token each step: odd states,
// long strings, many escapes). Prints median / p99 / max per mask call on one core.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "format/mapped_file.h"
#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

using namespace kvasir;
using Clock = std::chrono::steady_clock;

namespace {

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

struct Stats {
  std::vector<double> us;
  void print(const char* what) {
    std::sort(us.begin(), us.end());
    if (us.empty()) return;
    auto at = [&](double q) { return us[std::min(us.size() - 1, size_t(q * double(us.size())))]; };
    std::printf("| %s | %zu | %.1f | %.1f | %.1f |\n", what, us.size(), at(0.5), at(0.99), us.back());
  }
};

const char* kSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "email": {"type": "string", "format": "email"},
    "active": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["street", "city", "zip"]},
    "score": {"type": "number", "minimum": 0, "maximum": 10}
  },
  "required": ["name", "age", "email", "active", "tags", "address"]
})";

const char* kDocument =
    R"({"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "active": true, "tags": ["math", "poetry", "engines"], "address": {"street": "12 St James's Square", "city": "London", "zip": "10001"}, "score": 9.75})";

}  // namespace

int main(int argc, char** argv) {
  std::string path = "models/gemma-3-270m-q4_k_m.gguf";
  int docs = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--docs") && i + 1 < argc) docs = std::atoi(argv[++i]);
    else path = argv[i];
  }
  auto file = MappedFile::open(path);
  if (!file) return std::fprintf(stderr, "%s\n", file.error().c_str()), 1;
  auto parsed = gguf::parse(file->bytes());
  if (!parsed) return std::fprintf(stderr, "%s\n", parsed.error().c_str()), 1;
  auto tok = Tokenizer::from_gguf(*parsed);
  if (!tok) return std::fprintf(stderr, "%s\n", tok.error().c_str()), 1;

  auto t0 = Clock::now();
  std::vector<std::string> bytes(size_t(tok->n_vocab()));
  for (int32_t id = 0; id < tok->n_vocab(); ++id)
    if (!tok->is_special(id)) bytes[size_t(id)] = tok->piece(id);
  auto index = std::make_shared<grammar::TokenIndex>(std::move(bytes));
  std::printf("vocabulary %d tokens; token index %.1f ms\n", tok->n_vocab(), us_since(t0) / 1e3);

  t0 = Clock::now();
  auto any = grammar::parse_gbnf(grammar::json_object_gbnf());
  auto any_compiled = grammar::compile(std::move(*any), index);
  std::printf("JSON primitives' star tables (once per model) %.1f ms\n", us_since(t0) / 1e3);

  const auto schema = nlohmann::ordered_json::parse(kSchema);
  Stats compile_us;
  std::shared_ptr<const grammar::CompiledGrammar> compiled;
  for (int i = 0; i < 20; ++i) {
    t0 = Clock::now();
    auto g = grammar::compile_json_schema(schema);
    if (!g) return std::fprintf(stderr, "%s\n", g.error().c_str()), 1;
    compiled = grammar::compile(std::move(*g), index);
    compile_us.us.push_back(us_since(t0));
  }

  const std::vector<int32_t> doc = tok->encode(kDocument, {.add_special = false});
  Stats real, random_walk;
  for (int d = 0; d < docs; ++d) {
    grammar::Matcher m(compiled);
    for (int32_t t : doc) {
      t0 = Clock::now();
      auto mask = m.mask();
      real.us.push_back(us_since(t0));
      if (!((mask[size_t(t) / 64] >> (t % 64)) & 1))
        return std::fprintf(stderr, "token %d ('%s') not allowed\n", t, tok->piece(t).c_str()), 1;
      m.accept(t);
    }
    if (!m.can_end()) return std::fprintf(stderr, "document incomplete\n"), 1;
  }
  std::mt19937_64 rng(7);
  for (int d = 0; d < docs; ++d) {
    grammar::Matcher m(compiled);
    for (int s = 0; s < 200 && !m.done(); ++s) {
      t0 = Clock::now();
      auto mask = m.mask();
      random_walk.us.push_back(us_since(t0));
      std::vector<int32_t> allowed;
      for (size_t w = 0; w < mask.size(); ++w)
        for (uint64_t bits = mask[w]; bits; bits &= bits - 1) allowed.push_back(int32_t(w * 64 + size_t(__builtin_ctzll(bits))));
      if (allowed.empty()) break;
      m.accept(allowed[rng() % allowed.size()]);
    }
  }
  std::printf("\n| what | calls | median µs | p99 µs | max µs |\n|---|---:|---:|---:|---:|\n");
  compile_us.print("schema compile (to GBNF, parse, bind)");
  real.print("mask, realistic document");
  random_walk.print("mask, random allowed tokens");
  return 0;
}
