// A draft head for stories260K distilled in about a second, and the story openings its tests
// continue (tests/engine/eagle_draft_test.cpp, tests/cuda/cuda_spec_head_test.cpp).
#pragma once
#include <numeric>
#include <string>
#include <vector>

#include "compress/distill_head.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::test_support {

// Every token in the head's readout, 400 steps over the teacher's features of `tokens` in windows
// of 128.
inline Status distill_story_head(const Model& model, const std::vector<int32_t>& tokens, const std::string& path) {
  auto f = compress::teacher_features(model, tokens, {.n_ctx = 128, .bos = 1, .num_threads = 2});
  if (!f) return Error{f.error()};
  std::vector<int32_t> all(static_cast<size_t>(model.config().n_vocab));
  std::iota(all.begin(), all.end(), 0);
  auto head = compress::EagleHead::init(model, 128, all, 1);
  if (!head) return Error{head.error()};
  auto r = compress::train_head(*head, *f, *f, {.steps = 400, .batch = 32, .warmup = 20, .lr = 3e-3, .eval_every = 0,
                                                .eval_positions = 500, .num_threads = 2});
  if (!r) return Error{r.error()};
  return head->save(path);
}

// Greedy continuations of three story openings, 64 tokens each.
inline std::vector<engine::GenerationParams> story_requests(const Tokenizer& tok) {
  std::vector<engine::GenerationParams> reqs;
  for (const char* start : {"Once upon a time", "The little dog", "Lily and Ben went to the park"}) {
    engine::GenerationParams p;
    p.prompt = tok.encode(start);
    p.stop = {.max_tokens = 64, .ignore_eos = true};
    p.sampling = {.temperature = 0.f};
    reqs.push_back(std::move(p));
  }
  return reqs;
}

}  // namespace kvasir::test_support
