// The LoRA adapters a server serves, by the model name requests use (vLLM's way: "model":
// "NAME" selects the adapter NAME over the base model). Loaded at start (serve --lora NAME=FILE)
// and, where serve allows it (--allow-runtime-lora), at run time through
// /v1/load_lora_adapter and /v1/unload_lora_adapter. Thread-safe: handlers look names up while
// others load. An unloaded adapter stays alive for the requests already running on it.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/lora.h"
#include "runtime/model_runner.h"

namespace kvasir::server {

struct LoraEntry {
  std::string name, path;
  float scale = 1.f;
  std::shared_ptr<const LoraAdapter> adapter;
};

class LoraAdapters {
 public:
  // Reads `path` against the runner's model and serves it as `name`: an error for a taken name
  // (the base model's included), a bad name, or a bad file (named, ErrorCode::invalid_argument).
  Status load(const std::string& name, const std::string& path, float scale, const runtime::ModelRunner& runner,
              const std::string& base_name);
  Status unload(const std::string& name);  // ErrorCode::not_found when none has the name
  std::shared_ptr<const LoraAdapter> find(const std::string& name) const;
  std::vector<LoraEntry> list() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, LoraEntry> by_name_;
};

// "NAME=FILE" (serve --lora) split at the first '='.
Result<std::pair<std::string, std::string>> parse_lora_flag(const std::string& flag);

}  // namespace kvasir::server
