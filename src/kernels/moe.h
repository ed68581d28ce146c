// Mixture-of-experts routing, as pure functions: which experts a token goes to and with what
// weight, and the grouping of a batch's (token, expert) slots by expert so that each expert's
// matrices are applied once to all of its rows.
#pragma once
#include <cstdint>

namespace kvasir::kernels {

// One token's router: p = softmax(logits) over n_experts, the k largest p (ties: the lower
// expert id first) in decreasing order into ids[0..k), their p into weights, divided by their
// sum when renormalize. k <= n_experts. `scratch` holds n_experts floats.
void moe_route(const float* logits, int64_t n_experts, int64_t k, bool renormalize, int32_t* ids, float* weights,
               float* scratch);

// The scalar twin: the same contract written the slow way (whole ranking by a stable sort);
// bitwise equal to moe_route.
void moe_route_ref(const float* logits, int64_t n_experts, int64_t k, bool renormalize, int32_t* ids, float* weights);

// Groups n_slots slots (slot s routed to expert ids[s]) by expert, slots ascending within an
// expert: expert e's slots are order[offsets[e] .. offsets[e + 1]), and slot s sits at position
// pos_of[s] of that order. offsets holds n_experts + 1 entries. Ids must be in [0, n_experts).
void moe_group(const int32_t* ids, int64_t n_slots, int64_t n_experts, int64_t* offsets, int32_t* order,
               int32_t* pos_of);

}  // namespace kvasir::kernels
