#include "runtime/cpu_runner.h"

#include <algorithm>

namespace kvasir::runtime {

Result<std::unique_ptr<CpuRunner>> CpuRunner::create(const Model& model, const CpuRunnerOptions& o) {
  const ModelConfig& c = model.config();
  if (o.block_size < 1) return Error{"the KV block size must be >= 1", ErrorCode::invalid_argument};
  const KvCacheOptions kv_format{.type = o.kv_type, .layer_types = o.kv_layer_types, .rotate_k = o.kv_rotate_k};
  const uint64_t per_token = KvCache::bytes_per_token(c, kv_format);
  int64_t blocks = o.kv_blocks;
  if (blocks <= 0) {
    uint64_t mem = o.kv_mem_bytes;
    if (mem == 0) mem = std::min<uint64_t>(uint64_t(std::max<int64_t>(o.default_kv_tokens, 1)) * per_token, 1ull << 30);
    blocks = int64_t(mem / (per_token * uint64_t(o.block_size)));
  }
  if (blocks < 2)
    return Error{"the KV cache budget holds fewer than 2 blocks of " + std::to_string(o.block_size) + " tokens",
                 ErrorCode::invalid_argument};
  if (blocks > (int64_t(1) << 30)) return Error{"too many KV blocks", ErrorCode::invalid_argument};
  KvCacheOptions kvo = kv_format;
  kvo.num_blocks = blocks;
  kvo.block_size = o.block_size;
  auto kv = KvCache::create(c, kvo);
  if (!kv) return Error{kv.error()};
  RunnerInfo info{.n_vocab = c.n_vocab,
                  .n_embd = c.n_embd,
                  .n_ctx_train = c.n_ctx_train,
                  .max_batch_tokens = o.max_batch_tokens,
                  .num_kv_blocks = blocks,
                  .block_size = o.block_size,
                  .n_layers = c.n_layers,
                  .identity = model.path() + "#" + c.arch_name};
  return std::unique_ptr<CpuRunner>(new CpuRunner(model, o, std::move(*kv), std::move(info)));
}

CpuRunner::CpuRunner(const Model& model, const CpuRunnerOptions& o, KvCache kv, RunnerInfo info)
    : kv_(std::move(kv)),
      forward_(model, {.max_batch_tokens = o.max_batch_tokens, .num_threads = o.num_threads}),
      info_(std::move(info)) {}

void CpuRunner::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  forward_.pool().parallel_for(n, 1, [&](int64_t b, int64_t e, int) { fn(b, e); });
}

}  // namespace kvasir::runtime
