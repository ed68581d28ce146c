#include "cli/teacher_texts.h"

#include <chrono>
#include <fstream>
#include <unordered_map>

#include "backends/engine_factory.h"
#include "cli/common.h"

namespace kvasir::cli {
namespace {

// The first n words of a text (split at single spaces, as written).
std::string first_words(const std::string& text, int32_t n) {
  size_t at = 0;
  for (int32_t i = 0; i < n; ++i) {
    const size_t next = text.find(' ', at + (i > 0));
    if (next == std::string::npos) return text;
    at = next;
  }
  return text.substr(0, at);
}

}  // namespace

Result<std::vector<std::string>> read_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error{"cannot open '" + path + "'", ErrorCode::not_found};
  std::vector<std::string> prompts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::string p;
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == 'n') p += '\n', ++i;
      else p += line[i];
    }
    prompts.push_back(std::move(p));
  }
  if (prompts.empty()) return Error{path + ": no prompts (one opening per line)", ErrorCode::invalid_argument};
  return prompts;
}

Result<TeacherTexts> teacher_texts(const Model& model, const Tokenizer& tok, std::span<const std::string> prompts,
                                   const TeacherTextOptions& o) {
  if (o.samples < 1 || o.max_tokens < 1) return Error{"teacher texts: samples and tokens must be positive", ErrorCode::invalid_argument};
  EngineFlags flags;
  flags.threads = o.threads;
  flags.max_seqs = o.max_seqs;
  auto options = flags.to_options();
  if (!options) return Error{options.error(), options.error_code()};
  auto core = backends::create_engine_core(model, tok, *options);
  if (!core) return Error{core.error(), core.error_code()};
  const auto t0 = std::chrono::steady_clock::now();
  TeacherTexts out;
  const int64_t total = int64_t(prompts.size()) * o.samples * (o.greedy ? 2 : 1);
  int64_t done = 0;
  // Runs one pass: each (opening, sampling) to completion; returns the continuations in order.
  auto pass = [&](const std::vector<std::string>& openings, bool greedy) -> Result<std::vector<std::string>> {
    std::unordered_map<engine::RequestId, size_t> index;
    std::vector<std::string> texts(openings.size());
    for (size_t i = 0; i < openings.size(); ++i) {
      engine::GenerationParams p;
      p.prompt = tok.encode(openings[i]);
      p.sampling = {.temperature = greedy ? 0.f : o.temperature, .top_k = 0, .top_p = greedy ? 1.f : o.top_p, .min_p = 0.f};
      p.sampling.seed = o.seed * 1000003 + i;
      p.stop.max_tokens = greedy ? std::max(1, o.max_tokens - o.greedy_words) : o.max_tokens;
      if (auto s = (*core)->validate(p); !s) return Error{"prompt " + std::to_string(i + 1) + ": " + s.error(), s.error_code()};
      auto id = (*core)->add_request(std::move(p));
      if (!id) return Error{id.error(), id.error_code()};
      index[*id] = i;
    }
    std::vector<engine::Delta> deltas;
    while ((*core)->has_unfinished()) {
      deltas.clear();
      if (auto s = (*core)->step(deltas); !s) return Error{s.error(), s.error_code()};
      for (auto& d : deltas) {
        texts[index.at(d.id)] += d.text;
        out.generated_tokens += int64_t(d.tokens.size());
        if (d.finish != engine::FinishReason::None && o.progress) o.progress(++done, total, out.generated_tokens);
      }
    }
    return texts;
  };
  std::vector<std::string> openings;
  for (const std::string& p : prompts)
    for (int32_t s = 0; s < o.samples; ++s) openings.push_back(p);
  auto sampled = pass(openings, false);
  if (!sampled) return Error{sampled.error(), sampled.error_code()};
  std::vector<std::string> greedy;
  if (o.greedy) {
    std::vector<std::string> starts;
    for (size_t i = 0; i < openings.size(); ++i) starts.push_back(openings[i] + first_words((*sampled)[i], o.greedy_words));
    auto g = pass(starts, true);
    if (!g) return Error{g.error(), g.error_code()};
    for (size_t i = 0; i < starts.size(); ++i) greedy.push_back(starts[i] + (*g)[i]);
  }
  // Each prompt's texts together (samples, then their greedy continuations), so that a held-out
  // tail of the texts holds whole prompts.
  for (size_t p = 0; p < prompts.size(); ++p) {
    const size_t first = p * size_t(o.samples);
    for (size_t i = first; i < first + size_t(o.samples); ++i) out.texts.push_back(openings[i] + (*sampled)[i]);
    for (size_t i = first; o.greedy && i < first + size_t(o.samples); ++i) out.texts.push_back(greedy[i]);
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace kvasir::cli
