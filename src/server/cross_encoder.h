// Relevance by a generative model read as a cross-encoder, as Qwen3-Reranker is used: the query
// and a document go into one chat prompt that asks whether the document answers the query, and
// the score is p("yes") / (p("yes") + p("no")) at the answer's first token. Every pair is one
// engine request of one generated token (its KV prefix, the instruction and the query, is shared
// through the prefix cache). serve --rerank generative routes /v1/rerank, /rerank and /v1/score
// here; the default (embedding) ranks by embedding cosine.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "http/message.h"
#include "server/protocol.h"
#include "server/state.h"

namespace kvasir::server {

inline constexpr const char* kDefaultRerankInstruction =
    "Given a web search query, retrieve relevant passages that answer the query";

struct Judged {
  std::vector<double> scores;  // per pair, in order, in [0, 1]
  int64_t prompt_tokens = 0;
};

// The prompt of one (query, document) pair, tokenized.
Result<std::vector<int32_t>> judge_prompt(const Backend& b, const std::string& query, const std::string& document);
// The ids read at the answer's first token: the first token of "yes" and of "no".
std::pair<int32_t, int32_t> yes_no_tokens(const Tokenizer& tokenizer);
// Scores every pair; a pair beyond the context is a 400 naming `param`; a client that hangs up
// aborts them.
Parsed<Judged> judge_pairs(ServerState& st, Backend& b, const http::Request& req,
                           const std::vector<std::pair<std::string, std::string>>& pairs, const std::string& param);

}  // namespace kvasir::server
