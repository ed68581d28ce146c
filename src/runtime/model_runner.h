// The runner seam: what the engine needs from a model to serve it. A runner owns its weights'
// execution and its paged KV storage; the engine owns everything else (which blocks belong to
// whom, sampling, stop rules). The CPU path is one runner (cpu_runner.h); a draft model is a
// second one, a fake runner drives engine tests without model files, and a GPU backend plugs in
// here.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/batch.h"
#include "model/kv_cache.h"
#include "model/lora.h"

namespace kvasir::runtime {

struct RunnerInfo {
  int64_t n_vocab = 0;           // logits per row
  int64_t n_embd = 0;            // hidden state width (embeddings); 0: the runner returns none
  int64_t n_ctx_train = 0;       // the longest context the model was trained for
  int64_t max_batch_tokens = 0;  // rows per forward at most
  int64_t n_kv_blocks = 0;       // physical blocks of the KV storage (ids 0..n_kv_blocks-1)
  int64_t block_size = 16;       // token positions per block
  int64_t n_layers = 0;          // transformer layers (0: not said)
  int64_t n_quantized_kv_layers = 0;  // layers whose K/V are stored in an 8- or 4-bit type
  // Same identity and same tokens give the same KV: what the prefix cache keys blocks on.
  std::string identity;
};

// What a runner is built with: where it runs, its rows per forward, its threads and its KV.
struct RunnerOptions {
  int device = -1;                 // CUDA device ordinal; -1: the CPU
  int64_t max_batch_tokens = 512;  // rows per forward at most
  int n_threads = 0;               // the CPU runner's threads; 0: physical cores
  // Neither kv.n_blocks nor kv.mem_bytes: default_kv_tokens' worth, capped (CPU 1 GiB, CUDA 4 GiB).
  KvOptions kv = {};
  int64_t default_kv_tokens = 64 * 2048;
  // The CPU runner computes on this pool (the engine samples on it too); null: its own of n_threads.
  std::shared_ptr<ThreadPool> pool = nullptr;
};

// How many KV blocks a runner allocates: `exact` when positive, else what `mem_bytes` holds, else
// default_tokens' worth capped at cap_bytes; an error below 2 blocks or above 2^30.
Result<int64_t> kv_blocks_for(uint64_t bytes_per_token, int64_t block_size, int64_t exact, uint64_t mem_bytes,
                              int64_t default_tokens, uint64_t cap_bytes);

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const RunnerInfo& info() const = 0;
  // Writes the K/V of every row into the blocks its block table names and returns the logits of
  // the rows with want_logits, in row order: [num_logit_rows][n_vocab], valid until the next call.
  // Preconditions as Forward::forward (checked, an error when violated).
  virtual Result<const float*> forward(const Batch& batch) = 0;
  // The last forward's final hidden states (after the output norm) of the rows with want_hidden,
  // in row order: [n][info().n_embd], valid until the next call; null where n_embd is 0.
  virtual const float* hidden() const { return nullptr; }

  // LoRA adapters. load_adapter reads a GGUF adapter against this runner's model (any thread);
  // set_adapter puts one in a slot (null: empties it) that batches name per sequence
  // (Batch::seq_adapter), from the thread that calls forward(), between forwards.
  virtual Result<std::shared_ptr<const LoraAdapter>> load_adapter(const std::string& path, float scale) const {
    return Error{"this runner does not run LoRA adapters", ErrorCode::invalid_argument};
  }
  virtual Status set_adapter(int32_t slot, std::shared_ptr<const LoraAdapter> adapter) {
    return Error{"this runner does not run LoRA adapters", ErrorCode::invalid_argument};
  }

  // KV block I/O: the bytes of named blocks, layer by layer (what a prefill instance ships to a
  // decode instance, what a disk tier keeps). A block's bytes in one layer are opaque; they are
  // valid in any runner whose kv_format() is the same string. kv_block_bytes 0: no block I/O.
  virtual size_t kv_block_bytes(int64_t layer) const { return 0; }
  virtual std::string kv_format() const { return {}; }
  // Copies blocks' bytes of `layer` to dst (blocks.size() * kv_block_bytes(layer) bytes), in order.
  virtual Status export_kv(int64_t layer, std::span<const int32_t> blocks, uint8_t* dst) const {
    return Error{"this runner has no KV block I/O", ErrorCode::invalid_argument};
  }
  // Writes src (as export_kv laid it out) into the blocks of `layer`.
  virtual Status import_kv(int64_t layer, std::span<const int32_t> blocks, const uint8_t* src) {
    return Error{"this runner has no KV block I/O", ErrorCode::invalid_argument};
  }
};

}  // namespace kvasir::runtime
