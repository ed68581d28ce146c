// Speculation with a trained EAGLE-style draft head (compress/eagle_head.h, `kvasir distill
// --head`): from the target's final hidden state at the row that chose a request's latest token
// (the engine hands it over after each step: Proposer::observe_hidden) and that token's embedding,
// the head predicts the next hidden state and reads it out through the target's own output rows
// for its N tokens; each further position feeds its predicted state back. One batched head forward
// per draft position for every request drafting, on the target's weights' kernels (the head's matrices in Q8_0, the readout rows in the target's
// own type), timed for the controller like a draft model's forwards. It scores its drafts
// (Proposer::scores_drafts): each carries the head's probability for it (its softmax over its
// tokens), and the engine drafts before planning the step, so that the controller prices each
// request's drafts of this step by how sure the head is of them (as EAGLE-2 shapes its trees by
// the draft's confidence) rather than by a request's past acceptance alone. A request's drafting
// stops where the product of those probabilities falls below min_confidence (its first draft
// is always offered).
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "spec/proposer.h"

namespace kvasir::spec {

Result<std::unique_ptr<Proposer>> eagle_proposer(const Model& target, const std::string& head_file,
                                                 std::shared_ptr<ThreadPool> pool, std::function<int64_t()> clock,
                                                 double min_confidence = 0);

}  // namespace kvasir::spec
