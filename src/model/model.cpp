#include "model/model.h"

#include "core/fnv.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace kvasir {
namespace {

// Fast enough to run over a few MiB at load.
struct Hasher {
  uint64_t h = kFnvOffset;
  void bytes(const void* p, size_t n) { h = fnv1a_words(h, p, n); }
  void u64(uint64_t v) { bytes(&v, 8); }
};

}  // namespace

// Every tensor's description, and three 4 KiB windows of its data (start, middle, end): a
// different quantization, a fine-tune or a pruned copy changes them, and hashing whole 5 GB
// files at every start would page them all in.
uint64_t hash_tensors(const gguf::File& file) {
  Hasher hs;
  constexpr uint64_t kWindow = 4096;
  for (const gguf::TensorInfo& t : file.tensors) {
    hs.bytes(t.name.data(), t.name.size());
    hs.u64(uint64_t(t.type));
    for (int64_t n : t.ne) hs.u64(uint64_t(n));
    hs.u64(t.nbytes);
    if (!t.data) continue;
    const uint64_t w = std::min(kWindow, t.nbytes);
    for (uint64_t at : {uint64_t(0), (t.nbytes - w) / 2, t.nbytes - w}) hs.bytes(t.data + at, w);
  }
  return hs.h;
}

Result<std::unique_ptr<Model>> Model::load(const std::string& path) {
  auto model = std::unique_ptr<Model>(new Model());
  auto file = MappedFile::open(path);
  if (!file) return Error{file.error()};
  model->file_ = std::move(*file);
  auto parsed = gguf::parse(model->file_.bytes());
  if (!parsed) return Error{path + ": " + parsed.error()};
  model->gguf_ = std::move(*parsed);
  auto config = config_from_gguf(model->gguf_);
  if (!config) return Error{path + ": " + config.error()};
  model->config_ = std::move(*config);
  auto weights = bind_weights(model->gguf_, model->config_);
  if (!weights) return Error{path + ": " + weights.error()};
  model->weights_ = std::move(*weights);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash_tensors(model->gguf_)));
  model->identity_ = model->config_.arch_name + "@" + hex;
  return model;
}

}  // namespace kvasir
