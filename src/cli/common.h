// Small helpers shared by the subcommands.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace kvasir::cli {

// Prints "error: msg" to stderr and returns exit code 1.
int fail(const std::string& message);
// "1,2, 3" -> {1, 2, 3}; errors name the bad item.
Result<std::vector<int32_t>> parse_id_list(const std::string& text);
Result<DType> parse_kv_type(const std::string& name);
// The model `run` uses without -m: models/gemma-3-270m-q4_k_m.gguf beside the binary's project,
// or $KVASIR_MODEL.
std::string default_model_path();

}  // namespace kvasir::cli
