#include "compress/chunk_pass.h"

#include <numeric>

#include "kernels/ops.h"
#include "kernels/quant/quant.h"

namespace kvasir::compress {

void embed_token(const Model& model, int32_t token, float* out) {
  const Matrix& e = model.weights().token_embd;
  kernels::quant_traits(e.type)->dequantize_row(static_cast<const uint8_t*>(e.data) + size_t(token) * row_bytes(e.type, e.n_in),
                                                out, e.n_in);
  if (const float s = model.config().embed_scale; s != 1.f) kernels::scale_inplace(out, e.n_in, s);
}

Result<int64_t> count_chunks(size_t n_tokens, int64_t n_ctx, int64_t max_chunks, const std::string& what) {
  if (n_ctx < 16) return Error{"chunks must be at least 16 tokens", ErrorCode::invalid_argument};
  int64_t chunks = int64_t(n_tokens) / n_ctx;
  if (max_chunks >= 0) chunks = std::min(chunks, max_chunks);
  if (chunks < 1)
    return Error{what + " has " + std::to_string(n_tokens) + " tokens; it needs at least one chunk of " + std::to_string(n_ctx),
                 ErrorCode::invalid_argument};
  return chunks;
}

Result<std::unique_ptr<ChunkPass>> ChunkPass::create(const Model& model, int64_t n_ctx, int num_threads) {
  constexpr int64_t kBlock = 16;
  auto kv = KvCache::create(model.config(), {.n_blocks = (n_ctx + kBlock - 1) / kBlock, .block_size = kBlock, .type = DType::F16});
  if (!kv) return Error{kv.error()};
  return std::unique_ptr<ChunkPass>(new ChunkPass(model, n_ctx, num_threads, std::move(*kv)));
}

ChunkPass::ChunkPass(const Model& model, int64_t n_ctx, int num_threads, KvCache kv)
    : fwd_(model, {.max_batch_tokens = n_ctx, .num_threads = num_threads}), kv_(std::move(kv)),
      table_(static_cast<size_t>(kv_.num_blocks())) {
  std::iota(table_.begin(), table_.end(), 0);
}

const Batch& ChunkPass::load(std::span<const int32_t> tokens, int32_t bos, bool hidden) {
  batch_.clear();
  batch_.add_sequence(table_);
  for (size_t t = 0; t < tokens.size(); ++t) batch_.add(t == 0 && bos >= 0 ? bos : tokens[t], int32_t(t), 0, false, hidden);
  return batch_;
}

}  // namespace kvasir::compress
