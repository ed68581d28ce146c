#include "runtime/cpu_runner.h"

#include <algorithm>
#include <cstring>

namespace kvasir::runtime {
namespace {

class SelfDraftRunner : public ModelRunner {
 public:
  SelfDraftRunner(Forward& forward, KvCache& kv, std::vector<int32_t> layers, std::vector<uint8_t> head_bytes,
                  Matrix head, RunnerInfo info)
      : forward_(forward),
        kv_(kv),
        layers_(std::move(layers)),
        head_bytes_(std::move(head_bytes)),
        head_(head),
        info_(std::move(info)) {
    if (!head_bytes_.empty()) head_.data = head_bytes_.data();
  }
  const RunnerInfo& info() const override { return info_; }
  Result<const float*> forward(const Batch& batch) override {
    return forward_.forward(batch, kv_, {.layers = layers_, .head = head_bytes_.empty() ? nullptr : &head_});
  }

 private:
  Forward& forward_;
  KvCache& kv_;  // the target's
  std::vector<int32_t> layers_;
  std::vector<uint8_t> head_bytes_;  // the chosen rows of the output matrix, in head order
  Matrix head_;
  RunnerInfo info_;
};

}  // namespace

Result<int64_t> kv_blocks_for(uint64_t per_token, int64_t block_size, int64_t exact, uint64_t mem_bytes,
                              int64_t default_tokens, uint64_t cap_bytes) {
  int64_t blocks = exact;
  if (blocks <= 0) {
    uint64_t mem = mem_bytes;
    if (mem == 0) mem = std::min<uint64_t>(uint64_t(std::max<int64_t>(default_tokens, 1)) * per_token, cap_bytes);
    blocks = int64_t(mem / (per_token * uint64_t(block_size)));
  }
  if (blocks < 2)
    return Error{"the KV cache budget holds fewer than 2 blocks of " + std::to_string(block_size) + " tokens",
                 ErrorCode::invalid_argument};
  if (blocks > (int64_t(1) << 30)) return Error{"too many KV blocks", ErrorCode::invalid_argument};
  return blocks;
}

Result<std::unique_ptr<CpuRunner>> CpuRunner::create(const Model& model, const RunnerOptions& o) {
  const ModelConfig& c = model.config();
  if (o.device >= 0) return Error{"the CPU runner cannot run on a CUDA device", ErrorCode::invalid_argument};
  if (o.kv.block_size < 1) return Error{"the KV block size must be >= 1", ErrorCode::invalid_argument};
  if (o.max_batch_tokens < 1) return Error{"max_batch_tokens must be >= 1", ErrorCode::invalid_argument};
  if (!o.kv.layer_types.empty() && int64_t(o.kv.layer_types.size()) != c.n_layers)
    return Error{"the KV layer types name " + std::to_string(o.kv.layer_types.size()) + " layers; the model has " +
                     std::to_string(c.n_layers),
                 ErrorCode::invalid_argument};
  KvOptions kvo = o.kv;
  auto blocks = kv_blocks_for(KvCache::bytes_per_token(c, kvo), kvo.block_size, kvo.n_blocks, kvo.mem_bytes,
                              o.default_kv_tokens, 1ull << 30);
  if (!blocks) return Error{blocks.error(), blocks.error_code()};
  kvo.n_blocks = *blocks;
  auto kv = KvCache::create(c, kvo);
  if (!kv) return Error{kv.error()};
  RunnerInfo info{.n_vocab = c.n_vocab,
                  .n_embd = c.n_embd,
                  .n_ctx_train = c.n_ctx_train,
                  .max_batch_tokens = o.max_batch_tokens,
                  .n_kv_blocks = *blocks,
                  .block_size = kvo.block_size,
                  .n_layers = c.n_layers,
                  .identity = model.identity()};
  for (int64_t il = 0; il < c.n_layers; ++il) info.n_quantized_kv_layers += dtype_info(kvo.layer_type(il)).block_size > 1;
  return std::unique_ptr<CpuRunner>(new CpuRunner(model, o, std::move(*kv), std::move(info)));
}

CpuRunner::CpuRunner(const Model& model, const RunnerOptions& o, KvCache kv, RunnerInfo info)
    : model_(model),
      kv_(std::move(kv)),
      forward_(model, {.max_batch_tokens = o.max_batch_tokens, .num_threads = o.n_threads, .pool = o.pool}),
      info_(std::move(info)) {
  forward_.set_lora_slots(&lora_slots_);
}

Status CpuRunner::set_adapter(int32_t slot, std::shared_ptr<const LoraAdapter> adapter) {
  if (slot < 0 || slot > 4096) return Error{"LoRA slot " + std::to_string(slot) + " out of range", ErrorCode::invalid_argument};
  if (size_t(slot) >= lora_slots_.size()) lora_slots_.resize(size_t(slot) + 1);
  lora_slots_[size_t(slot)] = std::move(adapter);
  return {};
}

Result<std::unique_ptr<ModelRunner>> CpuRunner::self_draft(const SelfDraftOptions& o) {
  const ModelConfig& c = model_.config();
  if (o.layers.empty()) return Error{"a self-speculative draft needs at least one layer", ErrorCode::invalid_argument};
  for (size_t i = 0; i < o.layers.size(); ++i)
    if (o.layers[i] < 0 || o.layers[i] >= c.n_layers || (i > 0 && o.layers[i] <= o.layers[i - 1]))
      return Error{"draft layers must be ascending indices below " + std::to_string(c.n_layers),
                   ErrorCode::invalid_argument};
  const Matrix& out = model_.weights().output;
  std::vector<uint8_t> head_bytes;
  Matrix head = out;
  if (!o.head_tokens.empty()) {
    const size_t rb = row_bytes(out.type, out.n_in);
    head_bytes.resize(rb * o.head_tokens.size());
    for (size_t i = 0; i < o.head_tokens.size(); ++i) {
      const int32_t t = o.head_tokens[i];
      if (t < 0 || t >= out.n_out) return Error{"draft head token " + std::to_string(t) + " is outside the vocabulary"};
      std::copy_n(static_cast<const uint8_t*>(out.data) + size_t(t) * rb, rb, head_bytes.data() + i * rb);
    }
    head.n_out = int64_t(o.head_tokens.size());
  }
  RunnerInfo info = info_;
  info.n_vocab = head.n_out;
  info.n_embd = 0;
  info.n_layers = int64_t(o.layers.size());
  info.identity += "#draft";
  return std::unique_ptr<ModelRunner>(
      new SelfDraftRunner(forward_, kv_, o.layers, std::move(head_bytes), head, std::move(info)));
}

size_t CpuRunner::kv_block_bytes(int64_t layer) const {
  return layer >= 0 && layer < info_.n_layers ? kv_.block_bytes(layer) : 0;
}

// Everything that decides what a block's bytes mean: the model, the geometry, each layer's type,
// the rotation and the calibrated basis (its floats hashed).
std::string CpuRunner::kv_format() const {
  const KvOptions& o = kv_.options();
  std::string f = info_.identity + "|cpu|bs" + std::to_string(o.block_size) + "|rot" + std::to_string(int(o.rotate_k)) + "|";
  for (int64_t il = 0; il < info_.n_layers; ++il) f += std::string(dtype_name(o.layer_type(il))) + ",";
  uint64_t h = 1469598103934665603ull;
  if (o.transform)
    for (const KvLayerTransform& lt : o.transform->layers)
      for (const auto* x : {&lt.k_shift, &lt.k_scale, &lt.v_shift, &lt.v_scale})
        for (float v : *x) {
          uint32_t bits;
          std::memcpy(&bits, &v, 4);
          h = (h ^ bits) * 1099511628211ull;
        }
  return f + "|basis" + std::to_string(o.transform ? h : 0);
}

namespace {
Status check_blocks(int64_t layer, int64_t n_layers, std::span<const int32_t> blocks, int64_t num_blocks) {
  if (layer < 0 || layer >= n_layers)
    return Error{"KV layer " + std::to_string(layer) + " outside the model's " + std::to_string(n_layers),
                 ErrorCode::invalid_argument};
  for (int32_t b : blocks)
    if (b < 0 || b >= num_blocks)
      return Error{"KV block " + std::to_string(b) + " outside the pool of " + std::to_string(num_blocks),
                   ErrorCode::invalid_argument};
  return {};
}
}  // namespace

Status CpuRunner::export_kv(int64_t layer, std::span<const int32_t> blocks, uint8_t* dst) const {
  if (auto s = check_blocks(layer, info_.n_layers, blocks, info_.n_kv_blocks); !s) return s;
  const size_t n = kv_.block_bytes(layer);
  for (size_t i = 0; i < blocks.size(); ++i) std::memcpy(dst + i * n, kv_.block_data(layer, blocks[i]), n);
  return {};
}

Status CpuRunner::import_kv(int64_t layer, std::span<const int32_t> blocks, const uint8_t* src) {
  if (auto s = check_blocks(layer, info_.n_layers, blocks, info_.n_kv_blocks); !s) return s;
  const size_t n = kv_.block_bytes(layer);
  for (size_t i = 0; i < blocks.size(); ++i) std::memcpy(kv_.block_data(layer, blocks[i]), src + i * n, n);
  return {};
}

}  // namespace kvasir::runtime
