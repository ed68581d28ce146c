// `kvasir run -m MODEL -p PROMPT -n N [sampling] [--ctx C] [-t THREADS] [--spec ngram]
// [--json-schema FILE | --grammar FILE]`: generated text on stdout and nothing else; timings on
// stderr. With --spec or a grammar the tokens come from the serving engine (one request), and
// with --spec stderr also gets the acceptance.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "cuda/cuda_runner.h"
#include "cli/common.h"
#include "backends/engine_factory.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "engine/structured.h"
#include "backends/runner_factory.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::cli {
namespace {

struct RunArgs {
  std::string model;
  std::string prompt;
  int n_predict = 128;
  SamplingParams sampling;
  int64_t n_ctx = 4096;
  int threads = 0;
  std::string device = "cpu";
  std::string quantize;
  std::string kv_type = "f16";
  bool kv_no_calibrate = false;
  int64_t batch = 512;
  SpecFlags spec;
  std::string json_schema_file, grammar_file;
  std::string lora;  // --lora FILE: a LoRA adapter over the model
  float lora_scale = 1.f;
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The grammar of --json-schema FILE or --grammar FILE (null when neither is given).
Result<std::shared_ptr<const grammar::CompiledGrammar>> cli_grammar(const RunArgs& a, const Tokenizer& tokenizer) {
  if (a.json_schema_file.empty() && a.grammar_file.empty()) return std::shared_ptr<const grammar::CompiledGrammar>();
  if (!a.json_schema_file.empty() && !a.grammar_file.empty()) return Error{"give --json-schema or --grammar, not both"};
  const bool schema = !a.json_schema_file.empty();
  const std::string& path = schema ? a.json_schema_file : a.grammar_file;
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"cannot read " + path};
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  engine::GrammarCache cache(engine::grammar_token_index(tokenizer), grammar::JsonWhitespace::bounded, 1);
  auto g = cache.get({schema ? engine::GrammarSpec::Kind::json_schema : engine::GrammarSpec::Kind::gbnf, text});
  if (!g) return Error{path + ": " + g.error()};
  return *g;
}

// One request through the engine, so that speculative decoding and grammars apply; text streams
// as it comes.
int run_engine(const RunArgs& a, const Model& model, const Tokenizer& tokenizer, std::vector<int32_t> prompt,
               DType kv_type, std::shared_ptr<const KvTransform> kv_transform, const engine::SpecOptions& spec,
               std::shared_ptr<const grammar::CompiledGrammar> grammar) {
  backends::ServingOptions o;
  o.engine.max_batch_tokens = int32_t(a.batch);
  o.engine.max_seqs = 1;
  o.engine.max_model_len = int32_t(a.n_ctx);
  o.engine.num_threads = a.threads;
  o.engine.spec = spec;
  o.kv = {.n_blocks = (a.n_ctx + 15) / 16 + 1, .type = kv_type, .transform = std::move(kv_transform)};
  auto device = cuda::parse_device(a.device);
  if (!device) return fail(device.error());
  o.device = *device;
  auto core = backends::create_engine_core(model, tokenizer, o);
  if (!core) return fail(core.error());
  engine::GenerationParams p;
  const size_t n_prompt = prompt.size();
  p.prompt = std::move(prompt);
  p.sampling = a.sampling;
  p.stop.max_tokens = std::max(1, std::min<int>(a.n_predict, int(a.n_ctx - int64_t(n_prompt))));
  p.grammar = std::move(grammar);
  if (!a.lora.empty()) {
    auto adapter = (*core)->runner().load_adapter(a.lora, a.lora_scale);
    if (!adapter) return fail(adapter.error());
    p.adapter = std::move(*adapter);
  }
  auto id = (*core)->add_request(std::move(p));
  if (!id) return fail(id.error());
  const auto t0 = Clock::now();
  double first_s = -1;
  int64_t generated = 0;
  std::vector<engine::Delta> deltas;
  while ((*core)->has_unfinished()) {
    deltas.clear();
    if (auto s = (*core)->step(deltas); !s) return fail(s.error());
    for (const auto& d : deltas) {
      if (!d.tokens.empty() && first_s < 0) first_s = seconds_since(t0);
      generated += int64_t(d.tokens.size());
      std::fwrite(d.text.data(), 1, d.text.size(), stdout);
    }
    std::fflush(stdout);
  }
  const double total_s = seconds_since(t0);
  const double gen_s = total_s - std::max(first_s, 0.0);
  const engine::EngineStats st = (*core)->stats();
  std::fprintf(stderr, "\nprompt: %zu tokens, %.2f ms, %.1f tok/s | generated: %lld tokens, %.2f ms, %.1f tok/s after the first\n",
               n_prompt, first_s * 1e3, double(n_prompt) / std::max(first_s, 1e-9), (long long)generated, gen_s * 1e3,
               double(std::max<int64_t>(generated - 1, 0)) / std::max(gen_s, 1e-9));
  if (spec.method != engine::SpecMethod::none)
    std::fprintf(stderr, "speculation: %lld draft tokens, %lld accepted (%.1f%%), %.2f tokens per step\n",
                 (long long)st.spec_draft_tokens, (long long)st.spec_accepted_tokens,
                 st.spec_draft_tokens ? 100.0 * double(st.spec_accepted_tokens) / double(st.spec_draft_tokens) : 0.0,
                 double(generated) / double(std::max<int64_t>(st.num_steps - 1, 1)));
  if (st.spec_draft_tokens > 0) {
    std::fprintf(stderr, "acceptance by draft position:");
    for (size_t j = 0; j < st.spec_draft_tokens_at.size() && st.spec_draft_tokens_at[j] > 0; ++j)
      std::fprintf(stderr, " %zu: %.2f", j, double(st.spec_accepted_tokens_at[j]) / double(st.spec_draft_tokens_at[j]));
    std::fprintf(stderr, "\n");
  }
  return 0;
}

int run_generate(RunArgs a) {
  a.model = model_path(a.model);
  auto model = load_model(a.model, a.quantize, a.threads);
  if (!model) return fail(model.error());
  auto tokenizer = Tokenizer::from_gguf((*model)->gguf());
  if (!tokenizer) return fail(a.model + ": " + tokenizer.error());
  auto kv_type = parse_kv_type(a.kv_type);
  if (!kv_type) return fail(kv_type.error());

  std::vector<int32_t> tokens = tokenizer->encode(a.prompt);
  if (tokens.empty()) return fail("the prompt tokenizes to nothing");
  if (int64_t(tokens.size()) >= a.n_ctx)
    return fail("prompt of " + std::to_string(tokens.size()) + " tokens does not fit the context of " +
                std::to_string(a.n_ctx) + " (raise --ctx)");
  auto spec = a.spec.to_options();
  if (!spec) return fail(spec.error());
  auto grammar = cli_grammar(a, *tokenizer);
  if (!grammar) return fail(grammar.error());
  if (auto st = a.spec.prepare(**model, *tokenizer, a.threads, *spec); !st) return fail(st.error());
  auto kv_transform = calibrate_kv_cache(**model, *tokenizer, *kv_type, a.n_ctx, "", a.threads, !a.kv_no_calibrate);
  if (!kv_transform) return fail(kv_transform.error());
  if (spec->method != engine::SpecMethod::none || *grammar || !a.lora.empty())
    return run_engine(a, **model, *tokenizer, std::move(tokens), *kv_type, *kv_transform, *spec, *grammar);
  auto device = cuda::parse_device(a.device);
  if (!device) return fail(device.error());
  auto session = backends::create_session(**model, {.n_ctx = a.n_ctx, .max_batch_tokens = a.batch, .n_threads = a.threads,
                                                    .device = *device, .kv = {.type = *kv_type, .transform = *kv_transform}});
  if (!session) return fail(session.error());

  const int64_t n_vocab = (*model)->config().n_vocab;
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  auto keep = [&](int64_t, const float* l) { std::copy(l, l + n_vocab, logits.begin()); };
  const auto t0 = Clock::now();
  if (auto s = (*session)->eval(tokens, false, keep); !s) return fail(s.error());
  const double prompt_s = seconds_since(t0);
  const size_t n_prompt = tokens.size();

  Sampler sampler(a.sampling);
  StreamDecoder decoder(*tokenizer, /*skip_special=*/true, /*continuation=*/true);
  const auto t1 = Clock::now();
  int generated = 0;
  for (; generated < a.n_predict; ++generated) {
    // The engine's draw (keyed by position): the same tokens as `--spec` runs and the server give.
    Distribution dist = sampler.distribution(logits, tokens);
    const int32_t next = sampler.draw_at(dist, int64_t(tokens.size()));
    if (tokenizer->is_eog(next)) break;
    tokens.push_back(next);
    const std::string text = decoder.push(next);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if ((*session)->n_past() >= a.n_ctx) {
      ++generated;
      std::fprintf(stderr, "\n[context of %lld tokens is full]\n", static_cast<long long>(a.n_ctx));
      break;
    }
    const int32_t tok[1] = {next};
    if (auto s = (*session)->eval(tok, false, keep); !s) return fail(s.error());
  }
  const std::string tail = decoder.flush();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fflush(stdout);
  const double gen_s = seconds_since(t1);
  std::fprintf(stderr, "\nprompt: %zu tokens, %.2f ms, %.1f tok/s | generated: %d tokens, %.2f ms, %.1f tok/s\n",
               n_prompt, prompt_s * 1e3, n_prompt / std::max(prompt_s, 1e-9), generated, gen_s * 1e3,
               generated / std::max(gen_s, 1e-9));
  return 0;
}

}  // namespace

void register_run(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt");
  cmd->add_option("-m,--model", a->model, "GGUF model (default: the installed Gemma 3 270M)");
  cmd->add_option("-p,--prompt", a->prompt, "Prompt text")->required();
  cmd->add_option("-n,--n-predict", a->n_predict, "Tokens to generate")->check(CLI::Range(0, 1 << 24));
  add_sampling_flags(cmd, a->sampling);
  cmd->add_option("-c,--ctx", a->n_ctx, "Context size in tokens")->check(CLI::Range(int64_t(16), int64_t(1) << 22));
  cmd->add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
  cmd->add_option("--device", a->device, "cpu, cuda or cuda:N (the CUDA runner)");
  cmd->add_option("--quantize", a->quantize, "Quantize an F32/F16/BF16 model in memory at load (q8_0, q4_0, q4_k_m, ...): the same bytes as `kvasir quantize`");
  cmd->add_option("-b,--batch", a->batch, "Prefill chunk in tokens")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--kv-type", a->kv_type, "KV cache type: f16, f32, q8_0 or q4_0 (quantized K and V are stored in a basis calibrated at start-up)");
  cmd->add_flag("--kv-no-calibrate", a->kv_no_calibrate, "Store quantized K and V as they are (no KV calibration)");
  a->spec.add_to(cmd);
  cmd->add_option("--lora", a->lora, "A LoRA adapter (llama.cpp's GGUF format) over the model");
  cmd->add_option("--lora-scale", a->lora_scale, "Multiplies the adapter's delta")->capture_default_str();
  cmd->add_option("--json-schema", a->json_schema_file, "Constrain the output to JSON matching this JSON Schema file");
  cmd->add_option("--grammar", a->grammar_file, "Constrain the output to this GBNF grammar file");
  cmd->callback([&handler, a] { handler = [a] { return run_generate(*a); }; });
}

}  // namespace kvasir::cli
