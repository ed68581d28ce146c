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

// A self-speculative draft: the target's own weights through a subset of its layers (early exit:
// the first L; layer skipping: all but a chosen set), then its output norm and head.
struct SelfDraftOptions {
  std::vector<int32_t> layers;       // strictly ascending, non-empty
  std::vector<int32_t> head_tokens;  // the vocabulary rows the draft's head projects onto; empty: all
};

class CpuRunner : public ModelRunner {
 public:
  static Result<std::unique_ptr<CpuRunner>> create(const Model& model, const RunnerOptions& options);

  const RunnerInfo& info() const override { return info_; }
  Result<const float*> forward(const Batch& batch) override { return forward_.forward(batch, kv_); }
  const float* hidden() const override { return forward_.hidden(); }
  size_t kv_block_bytes(int64_t layer) const override;
  std::string kv_format() const override;
  Status export_kv(int64_t layer, std::span<const int32_t> blocks, uint8_t* dst) const override;
  Status import_kv(int64_t layer, std::span<const int32_t> blocks, const uint8_t* src) override;
  Result<std::shared_ptr<const LoraAdapter>> load_adapter(const std::string& path, float scale) const override {
    return LoraAdapter::load(path, model_, scale);
  }
  Status set_adapter(int32_t slot, std::shared_ptr<const LoraAdapter> adapter) override;

  // A draft runner over this runner's weights, Forward, threads and KV storage (nothing is copied
  // but the head's rows): its forwards read and write the target's K/V of the layers they run, in
  // the blocks the batch names (spec::KvMode::target). Its logits rows are [head_tokens.size()]
  // wide when a head is chosen (logit i is token head_tokens[i]). Valid while this runner lives;
  // the two run one after the other, never at once.
  Result<std::unique_ptr<ModelRunner>> self_draft(const SelfDraftOptions& options);
  // The forward pass itself: what calibration hooks its activations into.
  Forward& forward_pass() { return forward_; }

 private:
  CpuRunner(const Model& model, const RunnerOptions& options, KvCache kv, RunnerInfo info);

  const Model& model_;
  KvCache kv_;
  Forward forward_;
  RunnerInfo info_;
  Forward::LoraSlots lora_slots_;  // what Batch::seq_adapter names
};

}  // namespace kvasir::runtime
