// Loading the llama.cpp goldens from the shared folder.
#pragma once
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

inline std::string shared_path(const std::string& rel) { return std::string(KVASIR_SHARED_DIR) + "/" + rel; }

inline nlohmann::json load_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

#include <span>
// Greedy choice with llama.cpp's tie rule (lowest id wins).
inline int32_t argmax_lowest(std::span<const float> v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[size_t(best)]) best = int32_t(i);
  return best;
}
