// Decode speed with a JSON Schema against free text, on the same engine path (one request, one
// EngineCore step per token), interleaved A/B rounds; time per output token after the first.
//
//   structured_decode_bench [MODEL.gguf] [--rounds R] [--tokens N] [--threads T]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backends/engine_factory.h"
#include "engine/engine.h"
#include "engine/structured.h"
#include "model/model.h"

using namespace kvasir;
using Clock = std::chrono::steady_clock;

namespace {

const char* kSchema = R"({"type":"object","properties":{
  "title":{"type":"string"},"summary":{"type":"string"},"year":{"type":"integer"},
  "keywords":{"type":"array","items":{"type":"string"}},"rating":{"type":"number"}},
  "required":["title","summary","year","keywords","rating"]})";

struct Run {
  double tpot_ms = 0;
  int tokens = 0;
};

Run run_one(const Model& model, const Tokenizer& tok, std::shared_ptr<const grammar::CompiledGrammar> g, int tokens,
            int threads, uint64_t seed) {
  backends::ServingOptions o{.engine = {.max_batch_tokens = 256, .max_seqs = 1, .num_threads = threads},
                             .kv = {.n_blocks = 64}};
  auto core = backends::create_engine_core(model, tok, o);
  engine::GenerationParams p;
  p.prompt = tok.encode("Write a JSON record describing a famous novel, with a long summary:\n");
  p.sampling = {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .seed = seed};
  p.stop = {.max_tokens = tokens, .ignore_eos = g == nullptr};
  p.grammar = std::move(g);
  (void)(*core)->add_request(std::move(p));
  std::vector<engine::Delta> deltas;
  std::vector<Clock::time_point> at;
  int n = 0;
  while ((*core)->has_unfinished()) {
    deltas.clear();
    (void)(*core)->step(deltas);
    for (const auto& d : deltas)
      if (!d.tokens.empty()) n += int(d.tokens.size()), at.push_back(Clock::now());
  }
  Run r;
  r.tokens = n;
  if (at.size() > 1) r.tpot_ms = std::chrono::duration<double, std::milli>(at.back() - at.front()).count() / double(at.size() - 1);
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = "models/gemma-3-270m-q4_k_m.gguf";
  int rounds = 5, tokens = 128, threads = 2;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else path = argv[i];
  }
  auto model = Model::load(path);
  if (!model) return std::fprintf(stderr, "%s\n", model.error().c_str()), 1;
  auto tok = Tokenizer::from_gguf((*model)->gguf());
  if (!tok) return std::fprintf(stderr, "%s\n", tok.error().c_str()), 1;
  engine::GrammarCache cache(engine::grammar_token_index(*tok));
  auto g = cache.get({engine::GrammarSpec::Kind::json_schema, kSchema});
  if (!g) return std::fprintf(stderr, "%s\n", g.error().c_str()), 1;
  std::vector<double> free_ms, json_ms, ratio;
  int json_tokens = 0;
  for (int r = 0; r < rounds; ++r) {
    const Run a = run_one(**model, *tok, nullptr, tokens, threads, uint64_t(r));
    const Run b = run_one(**model, *tok, *g, tokens, threads, uint64_t(r));
    free_ms.push_back(a.tpot_ms);
    json_ms.push_back(b.tpot_ms);
    ratio.push_back(a.tpot_ms / b.tpot_ms);
    json_tokens += b.tokens;
    std::printf("round %d: free %.2f ms/token (%d tokens), json schema %.2f ms/token (%d tokens)\n", r, a.tpot_ms,
                a.tokens, b.tpot_ms, b.tokens);
  }
  std::printf("median: free %.2f ms/token (%.1f tok/s), json schema %.2f ms/token (%.1f tok/s); "
              "speed ratio json/free %.3f (median of rounds)\n",
              median(free_ms), 1e3 / median(free_ms), median(json_ms), 1e3 / median(json_ms), median(ratio));
  return 0;
}
