#include "sample/logits_processor.h"

#include <limits>

namespace kvasir {

bool LogitBias::apply(std::span<float> row, RowContext&) {
  for (const auto& [id, bias] : bias_) row[size_t(id)] += bias;
  return true;
}

bool MinTokens::apply(std::span<float> row, RowContext& ctx) {
  if (ctx.n_generated >= n_ || ctx.may_end) return true;
  for (int32_t t : stop_ids_) row[size_t(t)] = -std::numeric_limits<float>::infinity();
  return !ctx.only_end;
}

bool ProcessorChain::active(const RowContext& ctx) const {
  for (const auto& p : chain_)
    if (p->active(ctx)) return true;
  return false;
}

bool ProcessorChain::apply(std::span<float> row, RowContext& ctx) const {
  for (const auto& p : chain_)
    if (p->active(ctx) && !p->apply(row, ctx)) return false;
  return true;
}

}  // namespace kvasir
