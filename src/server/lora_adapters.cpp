#include "server/lora_adapters.h"

namespace kvasir::server {

Status LoraAdapters::load(const std::string& name, const std::string& path, float scale,
                          const runtime::ModelRunner& runner, const std::string& base_name) {
  if (name.empty() || name.size() > 256) return Error{"a LoRA adapter needs a name of 1 to 256 characters", ErrorCode::invalid_argument};
  if (name == base_name) return Error{"'" + name + "' is the base model's name", ErrorCode::invalid_argument};
  {
    std::lock_guard lock(mu_);
    if (by_name_.count(name)) return Error{"the LoRA adapter '" + name + "' is already loaded", ErrorCode::invalid_argument};
  }
  auto adapter = runner.load_adapter(path, scale);  // outside the lock: reading a file
  if (!adapter) return Error{adapter.error(), adapter.error_code()};
  std::lock_guard lock(mu_);
  auto [it, fresh] = by_name_.emplace(name, LoraEntry{name, path, scale, std::move(*adapter)});
  if (!fresh) return Error{"the LoRA adapter '" + name + "' is already loaded", ErrorCode::invalid_argument};
  return {};
}

Status LoraAdapters::unload(const std::string& name) {
  std::lock_guard lock(mu_);
  if (by_name_.erase(name) == 0) return Error{"no LoRA adapter is named '" + name + "'", ErrorCode::not_found};
  return {};
}

std::shared_ptr<const LoraAdapter> LoraAdapters::find(const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second.adapter;
}

std::vector<LoraEntry> LoraAdapters::list() const {
  std::lock_guard lock(mu_);
  std::vector<LoraEntry> out;
  for (const auto& [_, e] : by_name_) out.push_back(e);
  return out;
}

Result<std::pair<std::string, std::string>> parse_lora_flag(const std::string& flag) {
  const size_t eq = flag.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == flag.size())
    return Error{"--lora takes NAME=FILE, not '" + flag + "'", ErrorCode::invalid_argument};
  return std::pair{flag.substr(0, eq), flag.substr(eq + 1)};
}

}  // namespace kvasir::server
