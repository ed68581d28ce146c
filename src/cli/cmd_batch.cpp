// `kvasir batch -m MODEL --input prompts.jsonl --output out.jsonl`: offline generation of many
// prompts at once through the engine (continuous batching, prefix cache). Each input line is a
// completions-style object; each output line, in input order, holds the text, finish reason,
// usage and timings. A summary with aggregate tokens/s goes to stderr.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "backends/engine_factory.h"
#include "cli/commands.h"
#include "engine/engine.h"

namespace kvasir::cli {
namespace {

using nlohmann::json;

struct BatchArgs {
  std::string model, input, output;
  EngineFlags engine;
};

// One completions-style request line -> GenerationParams. Errors name the line and field.
Result<engine::GenerationParams> parse_line(const json& j, const Tokenizer& tok, size_t line) {
  const std::string where = "line " + std::to_string(line) + ": ";
  if (!j.is_object()) return Error{where + "not a JSON object"};
  engine::GenerationParams p;
  p.sampling = {.temperature = 1.f, .top_k = 0, .top_p = 1.f, .min_p = 0.f, .penalty_last_n = 64};
  p.stop.max_tokens = 16;
  try {
    if (!j.contains("prompt") || !j["prompt"].is_string()) return Error{where + "'prompt' must be a string"};
    p.prompt = tok.encode(j["prompt"].get<std::string>());
    if (j.contains("max_tokens")) p.stop.max_tokens = j["max_tokens"].get<int32_t>();
    if (j.contains("temperature")) p.sampling.temperature = j["temperature"].get<float>();
    if (j.contains("top_p")) p.sampling.top_p = j["top_p"].get<float>();
    if (j.contains("top_k")) p.sampling.top_k = j["top_k"].get<int32_t>();
    if (j.contains("min_p")) p.sampling.min_p = j["min_p"].get<float>();
    if (j.contains("seed")) p.sampling.seed = j["seed"].get<uint64_t>();
    if (j.contains("presence_penalty")) p.sampling.presence_penalty = j["presence_penalty"].get<float>();
    if (j.contains("frequency_penalty")) p.sampling.frequency_penalty = j["frequency_penalty"].get<float>();
    if (j.contains("repetition_penalty")) p.sampling.repetition_penalty = j["repetition_penalty"].get<float>();
    if (j.contains("min_tokens")) p.stop.min_tokens = j["min_tokens"].get<int32_t>();
    if (j.contains("ignore_eos")) p.stop.ignore_eos = j["ignore_eos"].get<bool>();
    if (j.contains("speculative")) p.speculative = j["speculative"].get<bool>();
    if (j.contains("stop")) {
      if (j["stop"].is_string()) p.stop.stop_strings = {j["stop"].get<std::string>()};
      else p.stop.stop_strings = j["stop"].get<std::vector<std::string>>();
    }
  } catch (const json::exception& e) {
    return Error{where + "bad field type (" + std::string(e.what()) + ")"};
  }
  return p;
}

std::string finish_name(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::Stop:
    case engine::FinishReason::StopString: return "stop";
    case engine::FinishReason::Length: return "length";
    case engine::FinishReason::Abort: return "abort";
    default: return "none";
  }
}

int run_batch(BatchArgs a) {
  a.model = model_path(a.model);
  auto model = load_model(a.model, a.engine.quantize, a.engine.threads);
  if (!model) return fail(model.error());
  auto tok = Tokenizer::from_gguf((*model)->gguf());
  if (!tok) return fail(a.model + ": " + tok.error());
  auto options = a.engine.to_options();
  if (!options) return fail(options.error());
  if (auto s = a.engine.kv.apply(**model, *tok, a.engine.threads, *options); !s) return fail(s.error());
  if (auto s = a.engine.spec.prepare(**model, *tok, a.engine.threads, options->engine.spec); !s) return fail(s.error());
  auto core = backends::create_engine_core(**model, *tok, *options);
  if (!core) return fail(core.error());

  std::ifstream in(a.input);
  if (!in) return fail("cannot open '" + a.input + "'");
  std::vector<engine::GenerationParams> requests;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return fail("line " + std::to_string(n) + ": invalid JSON");
    auto p = parse_line(j, *tok, n);
    if (!p) return fail(p.error());
    if (auto s = (*core)->validate(*p); !s) return fail("line " + std::to_string(n) + ": " + s.error());
    requests.push_back(std::move(*p));
  }

  struct Out {
    std::string text;
    engine::Delta last;
  };
  std::vector<Out> outs(requests.size());
  std::unordered_map<engine::RequestId, size_t> index;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < requests.size(); ++i) {
    auto id = (*core)->add_request(std::move(requests[i]));
    if (!id) return fail(id.error());
    index[*id] = i;
  }
  std::vector<engine::Delta> deltas;
  // A progress line on a terminal (never in a pipe or a log), redrawn at most 5 times a second.
  const bool progress = isatty(STDERR_FILENO);
  auto last_draw = t0;
  size_t finished = 0;
  int64_t generated = 0;
  while ((*core)->has_unfinished()) {
    deltas.clear();
    if (auto s = (*core)->step(deltas); !s) return fail(s.error());
    for (auto& d : deltas) {
      Out& o = outs[index.at(d.id)];
      o.text += d.text;
      generated += int64_t(d.tokens.size());
      if (d.finish != engine::FinishReason::None) o.last = std::move(d), ++finished;
    }
    const auto now = std::chrono::steady_clock::now();
    if (progress && now - last_draw > std::chrono::milliseconds(200)) {
      last_draw = now;
      const double s = std::chrono::duration<double>(now - t0).count();
      std::fprintf(stderr, "\rbatch: %zu/%zu done, %lld tokens, %.1f tok/s  ", finished, outs.size(),
                   (long long)generated, double(generated) / std::max(s, 1e-9));
    }
  }
  if (progress) std::fprintf(stderr, "\r\033[K");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::ofstream out(a.output);
  if (!out) return fail("cannot write '" + a.output + "'");
  int64_t prompt_tokens = 0, completion_tokens = 0, cached = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    const auto& d = outs[i].last;
    const auto& t = d.timings;
    json j = {{"index", i},
              {"text", outs[i].text},
              {"finish_reason", finish_name(d.finish)},
              {"usage", {{"prompt_tokens", d.usage.prompt_tokens}, {"completion_tokens", d.usage.completion_tokens},
                         {"cached_tokens", d.usage.cached_tokens}}},
              {"timings", {{"queue_ms", t.queue_ms}, {"ttft_ms", t.ttft_ms}, {"tpot_ms", t.tpot_ms}, {"e2e_ms", t.e2e_ms}}}};
    out << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    prompt_tokens += d.usage.prompt_tokens;
    completion_tokens += d.usage.completion_tokens;
    cached += d.usage.cached_tokens;
  }
  const auto st = (*core)->stats();
  std::fprintf(stderr,
               "batch: %zu requests in %.2f s | prompt %lld tokens (%lld cached) | generated %lld tokens, %.1f tok/s "
               "aggregate | %lld steps, %lld preemptions\n",
               outs.size(), secs, (long long)prompt_tokens, (long long)cached, (long long)completion_tokens,
               double(completion_tokens) / std::max(secs, 1e-9), (long long)st.num_steps, (long long)st.num_preemptions);
  if (st.spec_draft_tokens > 0)
    std::fprintf(stderr, "batch: speculation: %lld drafts, %lld draft tokens, %lld accepted (%.1f%%), %.2f tokens per step and sequence drafted\n",
                 (long long)st.spec_drafts, (long long)st.spec_draft_tokens, (long long)st.spec_accepted_tokens,
                 100.0 * double(st.spec_accepted_tokens) / double(st.spec_draft_tokens),
                 1.0 + double(st.spec_accepted_tokens) / double(std::max<int64_t>(st.spec_drafts, 1)));
  return 0;
}

}  // namespace

void register_batch(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<BatchArgs>();
  auto* cmd = app.add_subcommand("batch", "Generate for every prompt of a JSONL file, batched");
  cmd->add_option("-m,--model", a->model, "GGUF model (default: the installed Gemma 3 270M)");
  cmd->add_option("--input", a->input, "JSONL of completions-style requests")->required();
  cmd->add_option("--output", a->output, "JSONL results, in input order")->required();
  a->engine.add_to(cmd);
  cmd->callback([&handler, a] { handler = [a] { return run_batch(*a); }; });
}

}  // namespace kvasir::cli
