// `kvasir spec-sweep -m MODEL [--text FILE] [-n N] [--spec-k K] [--draft-head N]`: which of the
// model's own layers make the best self-speculative draft. Greedy generation from a prompt taken
// from the text, once without speculation and once per exit layer and per skip set (fixed K, no
// controller, so the raw acceptance shows), each with the whole head and, with --draft-head, with
// a head of the N most frequent tokens. Prints acceptance per draft position, tokens per step
// and decode tokens/s against the plain run, and the best choice with the flags that select it.
#include <chrono>
#include <cstdio>

#include "cli/common.h"
#include "backends/engine_factory.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "spec/draft_head.h"

namespace kvasir::cli {
namespace {

struct SweepArgs {
  std::string model, text, exit_layers, skip_sets;
  int32_t n_predict = 64;
  int32_t prompt_tokens = 128;
  int32_t max_k = 3;
  int32_t draft_head = 0;
  int threads = 0;
};

struct Outcome {
  double tok_s = 0;
  engine::EngineStats stats;
  int64_t generated = 0;
};

Result<Outcome> generate(const Model& model, const Tokenizer& tok, const std::vector<int32_t>& prompt, int32_t n,
                         const engine::SpecOptions& spec, int threads) {
  backends::ServingOptions o{.engine = {.max_batch_tokens = 512, .max_seqs = 1, .num_threads = threads, .spec = spec}};
  auto core = backends::create_engine_core(model, tok, o);
  if (!core) return Error{core.error()};
  engine::GenerationParams p;
  p.prompt = prompt;
  p.stop = {.max_tokens = n, .ignore_eos = true};
  p.sampling.temperature = 0;
  if (auto id = (*core)->add_request(p); !id) return Error{id.error()};
  std::vector<engine::Delta> deltas;
  Outcome out;
  std::chrono::steady_clock::time_point first;
  while ((*core)->has_unfinished()) {
    deltas.clear();
    if (auto s = (*core)->step(deltas); !s) return Error{s.error()};
    for (const auto& d : deltas) {
      if (!d.tokens.empty() && out.generated == 0) first = std::chrono::steady_clock::now();
      out.generated += int64_t(d.tokens.size());
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - first).count();
  out.tok_s = double(std::max<int64_t>(out.generated - 1, 0)) / std::max(secs, 1e-9);
  out.stats = (*core)->stats();
  return out;
}

int run_sweep(SweepArgs a) {
  a.model = model_path(a.model);
  auto model = load_model(a.model, "", a.threads);
  if (!model) return fail(model.error());
  auto tok = Tokenizer::from_gguf((*model)->gguf());
  if (!tok) return fail(a.model + ": " + tok.error());
  auto text = text_or_builtin(a.text, "--text");
  if (!text) return fail(text.error());
  std::vector<int32_t> tokens = tok->encode(*text);
  if (tokens.empty()) return fail("the text tokenizes to nothing");
  std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + std::min<ptrdiff_t>(a.prompt_tokens, ptrdiff_t(tokens.size())));
  if (tok->add_bos()) prompt.insert(prompt.begin(), tok->bos());
  const int32_t n_layers = int32_t((*model)->config().n_layers);

  std::vector<std::pair<std::string, engine::SpecOptions>> configs;
  std::vector<int32_t> exits;
  if (a.exit_layers.empty()) {
    for (int32_t l = 1; l < n_layers; ++l) exits.push_back(l);
  } else {
    auto l = parse_layer_list(a.exit_layers);
    if (!l) return fail("--exit-layers: " + l.error());
    exits = *l;
  }
  for (int32_t l : exits)
    configs.push_back({"--spec early-exit --exit-layer " + std::to_string(l),
                       {.method = engine::SpecMethod::early_exit, .max_k = a.max_k, .adaptive = false, .exit_layer = l}});
  std::vector<std::string> sets;
  if (a.skip_sets.empty()) {  // windows of a quarter of the layers, from the second layer to the second last
    const int32_t w = std::max(1, n_layers / 4);
    for (int32_t b = 1; b + w < n_layers; b += std::max(1, w / 2)) sets.push_back(std::to_string(b) + "-" + std::to_string(b + w - 1));
  } else {
    for (size_t at = 0; at <= a.skip_sets.size();) {
      const size_t semi = std::min(a.skip_sets.find(';', at), a.skip_sets.size());
      if (semi > at) sets.push_back(a.skip_sets.substr(at, semi - at));
      at = semi + 1;
    }
  }
  for (const std::string& set : sets) {
    auto l = parse_layer_list(set);
    if (!l) return fail("--skip-sets: " + l.error());
    configs.push_back({"--spec layer-skip --skip-layers " + set,
                       {.method = engine::SpecMethod::layer_skip, .max_k = a.max_k, .adaptive = false, .skip_layers = *l}});
  }
  std::vector<int32_t> head;
  if (a.draft_head > 0)
    head = spec::frequent_tokens(tokens, a.draft_head, tok->eog_ids(), std::min<int64_t>(tok->n_vocab(), (*model)->config().n_vocab));

  auto plain = generate(**model, *tok, prompt, a.n_predict, {}, a.threads);
  if (!plain) return fail(plain.error());
  std::printf("spec-sweep: %s, %d layers, prompt %zu tokens, %d generated, K = %d (fixed), threads %s\n", a.model.c_str(),
              n_layers, prompt.size(), a.n_predict, a.max_k, a.threads > 0 ? std::to_string(a.threads).c_str() : "default");
  std::printf("| draft | head | accepted | per position | tokens/step | decode tok/s | vs plain |\n|---|---:|---:|---|---:|---:|---:|\n");
  std::printf("| none | - | - | - | 1.00 | %.1f | 1.00x |\n", plain->tok_s);
  std::fflush(stdout);
  double best = plain->tok_s;
  std::string best_flags = "(none: no self-speculative draft beats plain decoding here)";
  for (const auto& [flags, options] : configs) {
    for (int with_head = 0; with_head <= (head.empty() ? 0 : 1); ++with_head) {
      engine::SpecOptions o = options;
      if (with_head) o.head_tokens = head;
      auto r = generate(**model, *tok, prompt, a.n_predict, o, a.threads);
      if (!r) return fail(flags + ": " + r.error());
      const auto& st = r->stats;
      std::string per;
      for (size_t j = 0; j < st.spec_draft_tokens_at.size(); ++j) {
        char b[16];
        std::snprintf(b, sizeof b, "%s%.2f", j ? " " : "", st.spec_draft_tokens_at[j] ? double(st.spec_accepted_tokens_at[j]) / double(st.spec_draft_tokens_at[j]) : 0.0);
        per += b;
      }
      const double acc = st.spec_draft_tokens ? double(st.spec_accepted_tokens) / double(st.spec_draft_tokens) : 0.0;
      const double per_step = double(r->generated) / double(std::max<int64_t>(st.num_steps - 1, 1));
      std::printf("| `%s` | %s | %.1f%% | %s | %.2f | %.1f | %.2fx |\n", flags.c_str(),
                  with_head ? std::to_string(head.size()).c_str() : "all", 100 * acc, per.c_str(), per_step, r->tok_s,
                  r->tok_s / std::max(plain->tok_s, 1e-9));
      std::fflush(stdout);
      if (r->tok_s > best) {
        best = r->tok_s;
        best_flags = flags + (with_head ? " --draft-head " + std::to_string(a.draft_head) : "");
      }
    }
  }
  std::printf("best: %s (%.1f tok/s, %.2fx plain)\n", best_flags.c_str(), best, best / std::max(plain->tok_s, 1e-9));
  return 0;
}

}  // namespace

void register_spec_sweep(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<SweepArgs>();
  auto* cmd = app.add_subcommand("spec-sweep", "Measure the model's own layers as speculative drafts (exit layers, skip sets)");
  cmd->add_option("-m,--model", a->model, "GGUF model (default: the installed Gemma 3 270M)");
  cmd->add_option("--text", a->text, "Text the prompt (and the --draft-head counts) come from (default: built in)");
  cmd->add_option("-n,--n-predict", a->n_predict, "Tokens generated per run")->check(CLI::Range(2, 1 << 16));
  cmd->add_option("--prompt-tokens", a->prompt_tokens, "Prompt length, from the text's start")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--spec-k", a->max_k, "Draft tokens per step (fixed)")->check(CLI::Range(1, 16));
  cmd->add_option("--exit-layers", a->exit_layers, "Exit layers to try, e.g. 4,8-12 (default: every one)");
  cmd->add_option("--skip-sets", a->skip_sets, "Skip sets to try, ';'-separated, e.g. '4-8;9-13' (default: quarter windows)");
  cmd->add_option("--draft-head", a->draft_head, "Also try a head of the N most frequent tokens of the text")->check(CLI::Range(0, 1 << 24));
  cmd->add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
  cmd->callback([&handler, a] { handler = [a] { return run_sweep(*a); }; });
}

}  // namespace kvasir::cli
