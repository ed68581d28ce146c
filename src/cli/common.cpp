#include "cli/common.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace kvasir::cli {

int fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

Result<std::vector<int32_t>> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    std::string item = text.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (item.empty() && j == text.size() && !ids.empty()) break;
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno || v < 0 || v > INT32_MAX)
      return Error{"bad token id '" + item + "' in --ids"};
    ids.push_back(int32_t(v));
    i = j + 1;
  }
  return ids;
}

Result<DType> parse_kv_type(const std::string& name) {
  if (name == "f16") return DType::F16;
  if (name == "f32") return DType::F32;
  return Error{"KV type must be f16 or f32, not '" + name + "'"};
}

std::string default_model_path() {
  if (const char* env = std::getenv("KVASIR_MODEL"); env && *env) return env;
  const std::string name = "models/gemma-3-270m-q4_k_m.gguf";
  // The binary lives in <project>/build/bin; look beside the project, then the working directory.
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto project = exe.parent_path().parent_path().parent_path();
    if (std::filesystem::exists(project / name)) return (project / name).string();
  }
  return name;
}

}  // namespace kvasir::cli
