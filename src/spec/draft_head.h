// The drafting head of a self-speculative draft: the tokens it may propose. On a large vocabulary
// (Gemma 3: 262k tokens) the output head is most of a drafted token's cost, and a draft only has
// to be right often, so it projects onto the most frequent tokens of a representative text.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace kvasir::spec {

// The n most frequent tokens of `text` (ties: the lower id), after the `always` tokens (end of
// generation), padded with the lowest unused ids when the text has fewer distinct tokens;
// ascending, ids below n_vocab only.
std::vector<int32_t> frequent_tokens(std::span<const int32_t> text, int32_t n, std::span<const int32_t> always,
                                     int64_t n_vocab);

}  // namespace kvasir::spec
