// A loaded model: the mapped file, its parsed metadata, config and bound weights.
#pragma once
#include <memory>
#include <string>

#include "core/status.h"
#include "format/gguf.h"
#include "format/mapped_file.h"
#include "model/config.h"
#include "model/weights.h"

namespace kvasir {

class Model {
 public:
  static Result<std::unique_ptr<Model>> load(const std::string& path);

  const ModelConfig& config() const { return config_; }
  const Weights& weights() const { return weights_; }
  // Calibration (GPTQ) swaps a layer's matrices for quantized copies between passes; a Forward
  // reads its matrices through weights() at every call and so sees the swap. The swapped-in
  // data must outlive the model's use.
  Weights& mutable_weights() { return weights_; }
  const gguf::File& gguf() const { return gguf_; }
  const std::string& path() const { return file_.path(); }
  // What the weights are, not where they lie: the architecture and a hash of every tensor's name,
  // type, shape and sampled bytes. Two files with the same tensors have the same identity on any
  // host (what KV shared between instances must agree on); the prefix cache keys blocks on it.
  const std::string& identity() const { return identity_; }

 private:
  MappedFile file_;
  gguf::File gguf_;
  ModelConfig config_;
  Weights weights_;
  std::string identity_;
};

// The content hash behind Model::identity() (exposed for tests).
uint64_t hash_tensors(const gguf::File& file);

}  // namespace kvasir
