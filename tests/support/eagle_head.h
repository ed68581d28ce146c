// A draft head for stories260K distilled in about a second (tests/engine/eagle_draft_test.cpp,
// tests/cuda/cuda_spec_head_test.cpp): every token in its readout, 400 steps over the teacher's
// features of `text` in windows of 128.
#pragma once
#include <numeric>
#include <string>
#include <vector>

#include "compress/distill_head.h"

namespace kvasir::test_support {

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

}  // namespace kvasir::test_support
