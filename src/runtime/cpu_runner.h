// The CPU runner: the batched Forward over a KvCache in this process's memory.
#pragma once
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "runtime/model_runner.h"

namespace kvasir::runtime {

struct CpuRunnerOptions {
  int64_t max_batch_tokens = 512;
  int num_threads = 0;         // 0: physical cores
  int64_t kv_blocks = 0;       // exact number of KV blocks; 0: from kv_mem_bytes
  uint64_t kv_mem_bytes = 0;   // KV budget; 0 with kv_blocks 0: default_kv_tokens tokens, capped at 1 GiB
  int64_t default_kv_tokens = 64 * 2048;
  DType kv_type = DType::F16;
  std::vector<DType> kv_layer_types = {};  // per layer; empty: kv_type everywhere
  bool kv_rotate_k = true;
  std::shared_ptr<const KvTransform> kv_transform = nullptr;  // quantized KV's basis (KV calibration)
  int64_t block_size = 16;
};

// A self-speculative draft: the target's own weights through a subset of its layers (early exit:
// the first L; layer skipping: all but a chosen set), then its output norm and head.
struct SelfDraftOptions {
  std::vector<int32_t> layers;       // strictly ascending, non-empty
  std::vector<int32_t> head_tokens;  // the vocabulary rows the draft's head projects onto; empty: all
};

class CpuRunner : public ModelRunner {
 public:
  static Result<std::unique_ptr<CpuRunner>> create(const Model& model, const CpuRunnerOptions& options);

  const RunnerInfo& info() const override { return info_; }
  Result<const float*> forward(const Batch& batch) override { return forward_.forward(batch, kv_); }
  const float* hidden() const override { return forward_.hidden(); }
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) override;
  size_t kv_block_bytes(int64_t layer) const override;
  std::string kv_format() const override;
  Status export_kv(int64_t layer, std::span<const int32_t> blocks, uint8_t* dst) const override;
  Status import_kv(int64_t layer, std::span<const int32_t> blocks, const uint8_t* src) override;

  // A draft runner over this runner's weights, Forward, threads and KV storage (nothing is copied
  // but the head's rows): its forwards read and write the target's K/V of the layers they run, in
  // the blocks the batch names (spec::KvMode::target). Its logits rows are [head_tokens.size()]
  // wide when a head is chosen (logit i is token head_tokens[i]). Valid while this runner lives;
  // the two run one after the other, never at once.
  Result<std::unique_ptr<ModelRunner>> self_draft(const SelfDraftOptions& options);

 private:
  CpuRunner(const Model& model, const CpuRunnerOptions& options, KvCache kv, RunnerInfo info);

  const Model& model_;
  KvCache kv_;
  Forward forward_;
  RunnerInfo info_;
};

}  // namespace kvasir::runtime
