// Prompt-lookup / n-gram drafting: find the most recent earlier occurrence of the sequence's last
// n tokens (n from max_n down to min_n, longest first) in its prompt and generated text, and
// propose the tokens that followed it. No model, a few microseconds; it pays on text that copies
// from its context (summaries, edits, code).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace kvasir::spec {

struct NgramOptions {
  int32_t min_n = 1;
  int32_t max_n = 4;
  int32_t max_scan = 8192;  // look back at most this many tokens
};

// Up to k tokens that followed the latest earlier match of the longest matching suffix; empty when
// nothing matches.
std::vector<int32_t> propose_ngram(std::span<const int32_t> tokens, int32_t k, const NgramOptions& options = {});

}  // namespace kvasir::spec
