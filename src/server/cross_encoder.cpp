#include "server/cross_encoder.h"

#include <cmath>

#include "server/generation.h"
#include "server/routes.h"
#include "server/slo.h"

namespace kvasir::server {

Result<std::vector<int32_t>> judge_prompt(const Backend& b, const std::string& query, const std::string& document) {
  const ordered_json messages = ordered_json::array(
      {{{"role", "system"},
        {"content",
         "Judge whether the Document meets the requirements based on the Query and the Instruct provided. Note that "
         "the answer can only be \"yes\" or \"no\"."}},
       {{"role", "user"},
        {"content", std::string("<Instruct>: ") + kDefaultRerankInstruction + "\n<Query>: " + query + "\n<Document>: " + document}}});
  // Thinking off, as the reranker was trained (Qwen3's template then writes an empty think block).
  auto text = b.chat.render(messages, chat::ChatRenderOptions{.extra = {{"enable_thinking", false}}});
  if (!text) return Error{text.error()};
  return b.chat.tokenize(*b.tokenizer, *text);
}

std::pair<int32_t, int32_t> yes_no_tokens(const Tokenizer& tok) {
  auto first = [&](const char* w) {
    const auto ids = tok.encode(w, EncodeOptions{.add_special = false});
    return ids.empty() ? 0 : ids[0];
  };
  return {first("yes"), first("no")};
}

Parsed<Judged> judge_pairs(ServerState& st, Backend& b, const http::Request& req,
                           const std::vector<std::pair<std::string, std::string>>& pairs, const std::string& param) {
  const auto [yes, no] = yes_no_tokens(*b.tokenizer);
  GenerationRequest tenancy;
  apply_tenancy(st.options.slo, req, tenancy);
  std::vector<engine::GenerationParams> params;
  std::vector<int32_t> prompt_of;
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto ids = judge_prompt(b, pairs[i].first, pairs[i].second);
    if (!ids) return bad_request("chat template: " + ids.error(), param);
    if (int64_t(ids->size()) >= b.max_model_len)
      return bad_request("document " + std::to_string(i) + " with the query is " + std::to_string(ids->size()) +
                             " tokens; this model's maximum context length is " + std::to_string(b.max_model_len),
                         param, "context_length_exceeded");
    engine::GenerationParams p;
    p.prompt = std::move(*ids);
    p.stop.max_tokens = 1;
    p.sampling.temperature = 0;
    p.top_logprobs = 0;
    p.logprob_tokens = {yes, no};
    p.speculative = false;
    p.cache_salt = tenancy.cache_salt;
    set_slo(p, tenancy.slo);
    params.push_back(std::move(p));
    prompt_of.push_back(int32_t(i));
  }
  Judged out;
  out.scores.assign(pairs.size(), -1);
  auto e = run_to_end(st, b, req, std::move(params), std::move(prompt_of), [&](int32_t choice, engine::Delta& d) -> std::optional<ApiError> {
    if (!d.logprobs.empty() && d.logprobs[0].top.size() == 2) {
      const double lp_yes = d.logprobs[0].top[0].second, lp_no = d.logprobs[0].top[1].second;
      out.scores[size_t(choice)] = 1.0 / (1.0 + std::exp(lp_no - lp_yes));
    }
    if (d.finish != engine::FinishReason::None) out.prompt_tokens += d.usage.prompt_tokens;
    return std::nullopt;
  });
  if (e) return *e;
  for (double s : out.scores)
    if (s < 0) return ApiError{.status = 503, .message = "a scoring request was aborted", .type = "server_error"};
  return out;
}

}  // namespace kvasir::server
