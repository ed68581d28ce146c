// What the load generator sends: synthetic prompts of controlled token length (drawn from a pool
// of real token ids, so the length is exact), prompts sharing a prefix (prefix-cache workloads),
// or prompts from a JSONL file.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kvasir::loadgen {

// "128" fixed; "64:512" uniform in [64, 512]; "log:16:1024" log-uniform (every power-of-two
// bucket about equally often: what the heatmaps want).
struct LengthSpec {
  enum class Kind { fixed, uniform, log_uniform };
  Kind kind = Kind::fixed;
  int64_t lo = 128, hi = 128;

  static Result<LengthSpec> parse(const std::string& text);
  int64_t sample(std::mt19937_64& rng) const;
  std::string to_string() const;
};

struct RequestSpec {
  std::vector<int32_t> prompt_ids;     // sent as a token-id prompt when set (completions only)
  std::string prompt_text;             // else text
  nlohmann::ordered_json messages;     // from a JSONL file with "messages" (chat)
  int64_t input_len = 0;               // tokens, when known before sending
  int64_t output_len = 0;              // max_tokens
  int64_t conversation = -1;           // the turns of one conversation are consecutive and go in order
};

// conversations: multi-turn chats whose history grows: turn k's prompt is turn k-1's prompt, a
// stand-in for its answer (output_len tokens) and a new user message (input_len tokens), after a
// prefix_len-token system prompt of the conversation's own. Token-id prompts (a vocabulary is needed).
enum class Dataset { random, shared_prefix, jsonl, conversations };

struct WorkloadOptions {
  Dataset dataset = Dataset::random;
  LengthSpec input_len = {}, output_len = {};
  int64_t prefix_len = 256;     // shared_prefix: tokens every prompt of a group shares
  int64_t num_prefixes = 1;     // shared_prefix: groups
  std::string prompt_file;      // jsonl: {"prompt": "..."} or {"messages": [...]}, optional "output_len"
  int64_t num_requests = 100;
  int64_t turns = 4;            // conversations: turns each (num_requests / turns conversations)
  uint64_t seed = 0;
};

// Synthetic filler text (common English words), for tokenizing into a token pool.
std::string filler_text(size_t words, uint64_t seed);

// `pool`: token ids to draw synthetic prompts from (empty: word prompts of about input_len tokens).
Result<std::vector<RequestSpec>> build_workload(const WorkloadOptions& options, const std::vector<int32_t>& pool);

}  // namespace kvasir::loadgen
