// `kvasir embed -m MODEL (--text T ... | -f FILE) [--pooling mean|cls|last] [--json]`: embeddings
// of texts through the engine (batched like `batch`): each text's final hidden states pooled as
// the model declares (mean for generative models, which declare nothing), L2-normalized. One
// JSON array per input line on stdout, in input order; with --json one OpenAI-shaped object.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "backends/engine_factory.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "engine/pooling.h"

namespace kvasir::cli {
namespace {

using nlohmann::json;

struct EmbedArgs {
  std::string model, file, pooling;
  std::vector<std::string> texts;
  bool json_out = false;
  EngineFlags engine;
};

int run_embed(EmbedArgs a) {
  a.model = model_path(a.model);
  if (a.texts.empty() == a.file.empty()) return fail("give the texts with --text (repeatable) or -f FILE (one per line)");
  std::vector<std::string> texts = a.texts;
  if (!a.file.empty()) {
    std::ifstream in(a.file == "-" ? "/dev/stdin" : a.file);
    if (!in) return fail("cannot read '" + a.file + "'");
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) texts.push_back(line);
    if (texts.empty()) return fail(a.file + ": no non-empty lines");
  }
  auto model = load_model(a.model, a.engine.quantize, a.engine.threads);
  if (!model) return fail(model.error());
  auto tok = Tokenizer::from_gguf((*model)->gguf());
  if (!tok) return fail(a.model + ": " + tok.error());
  auto pooling = engine::choose_pooling((*model)->config(), a.pooling);
  if (!pooling) return fail(pooling.error());
  if (pooling->pooling == engine::Pooling::none) return fail(a.model + " serves no embeddings: " + pooling->origin + " (use --pooling)");
  auto options = a.engine.to_options();
  if (!options) return fail(options.error());
  auto core = backends::create_engine_core(**model, *tok, *options);
  if (!core) return fail(core.error());

  std::unordered_map<engine::RequestId, size_t> index;
  for (size_t i = 0; i < texts.size(); ++i) {
    engine::GenerationParams p;
    p.prompt = tok->encode(texts[i]);
    p.stop.max_tokens = 0;
    p.pooling = pooling->pooling;
    if (auto s = (*core)->validate(p); !s) return fail("input " + std::to_string(i + 1) + ": " + s.error());
    auto id = (*core)->add_request(std::move(p));
    if (!id) return fail(id.error());
    index[*id] = i;
  }
  std::vector<std::vector<float>> vectors(texts.size());
  int64_t tokens = 0;
  size_t done = 0;
  const bool progress = isatty(STDERR_FILENO) && texts.size() > 1;
  const auto t0 = std::chrono::steady_clock::now();
  auto last_draw = t0;
  std::vector<engine::Delta> deltas;
  while ((*core)->has_unfinished()) {
    deltas.clear();
    if (auto s = (*core)->step(deltas); !s) return fail(s.error());
    for (auto& d : deltas) {
      if (d.finish == engine::FinishReason::None) continue;
      vectors[index.at(d.id)] = std::move(d.embedding);
      tokens += d.usage.prompt_tokens;
      ++done;
    }
    const auto now = std::chrono::steady_clock::now();
    if (progress && now - last_draw > std::chrono::milliseconds(200)) {
      last_draw = now;
      std::fprintf(stderr, "\rembed: %zu/%zu done  ", done, texts.size());
    }
  }
  if (progress) std::fprintf(stderr, "\r\033[K");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (a.json_out) {
    json data = json::array();
    for (size_t i = 0; i < vectors.size(); ++i) data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", vectors[i]}});
    std::cout << json{{"object", "list"}, {"data", data}, {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}.dump()
              << "\n";
  } else {
    for (const auto& v : vectors) std::cout << json(v).dump() << "\n";
  }
  std::fprintf(stderr, "embed: %zu inputs, %lld tokens, %s, %zu dimensions, %.2f s (%.0f tokens/s)\n", texts.size(),
               (long long)tokens, pooling->origin.c_str(), vectors.empty() ? size_t(0) : vectors[0].size(), secs,
               double(tokens) / std::max(secs, 1e-9));
  return 0;
}

}  // namespace

void register_embed(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<EmbedArgs>();
  auto* cmd = app.add_subcommand("embed", "Embeddings of texts (pooled final hidden states, unit length)");
  cmd->add_option("-m,--model", a->model, "GGUF model (default: the installed Gemma 3 270M)");
  cmd->add_option("--text", a->texts, "A text to embed (repeatable)");
  cmd->add_option("-f,--file", a->file, "Texts to embed, one per line ('-': stdin)");
  cmd->add_option("--pooling", a->pooling, "mean, cls or last (default: the model file's; mean when it declares none)")
      ->check(CLI::IsMember({"mean", "cls", "last"}));
  cmd->add_flag("--json", a->json_out, "Print one OpenAI-shaped object instead of one array per line");
  a->engine.add_to(cmd);
  cmd->callback([&handler, a] { handler = [a] { return run_embed(*a); }; });
}

}  // namespace kvasir::cli
