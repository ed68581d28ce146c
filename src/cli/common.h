// Small helpers shared by the subcommands.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/model.h"

namespace kvasir::cli {

// Prints "error: msg" to stderr and returns exit code 1.
int fail(const std::string& message);
// "1,2, 3" -> {1, 2, 3}; errors name the bad item.
Result<std::vector<int32_t>> parse_id_list(const std::string& text);
Result<DType> parse_kv_type(const std::string& name);
// API keys: the given ones (--api-key), KVASIR_API_KEY (which, unlike a flag, does not show in
// `ps`) and `key_file` (--api-key-file: one per line; blank lines and '#' comments skipped); each
// checked to be printable without spaces. What `serve` and `router` accept alike.
// Keys from --api-key, KVASIR_API_KEY and the key file (one per line: the key, then optionally
// settings that `serve` reads, server/slo.h); `settings`, when given, gets each key's text after it.
Result<std::vector<std::string>> collect_api_keys(std::vector<std::string> keys, const std::string& key_file,
                                                  std::vector<std::string>* settings = nullptr);
// The model `run` uses without -m: models/gemma-3-270m-q4_k_m.gguf beside the binary's project,
// or $KVASIR_MODEL.
std::string default_model_path();
// A -m argument: empty is the default model; hf://... or a URL is its file in the pull cache.
std::string model_path(const std::string& arg);
// Loads a model. With `quantize_type` (--quantize: q4_k_m, q8_0, ...), an F32/F16/BF16 file is
// first quantized in memory into an anonymous file (memfd) holding exactly what `kvasir quantize`
// would write, so the result is bit-identical to loading that file; the time is printed.
Result<std::unique_ptr<Model>> load_model(const std::string& path, const std::string& quantize_type = "",
                                          int threads = 0);

}  // namespace kvasir::cli

#include <CLI/CLI.hpp>

#include "backends/engine_factory.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace kvasir::cli {

// "512M", "2G", "1048576" -> bytes.
Result<uint64_t> parse_size(const std::string& text);

// --temp, --top-k, --top-p, --min-p, --repeat-penalty, --presence-penalty, --frequency-penalty,
// --seed (`run`, `chat`).
void add_sampling_flags(CLI::App* cmd, SamplingParams& sampling);

// Speculative decoding flags (`run`, `batch`, `serve`): --spec ngram|draft|early-exit|layer-skip|head,
// --draft-model PATH, --exit-layer L, --skip-layers LIST, --draft-head N, --draft-head-file F, --spec-k N, --no-spec-auto.
struct SpecFlags {
  std::string method = "none";
  int32_t max_k = 0;  // 0: the method's default (5 for --spec head, 4 otherwise)
  bool no_auto = false;
  std::string draft_model;
  int32_t exit_layer = 0;
  std::string skip_layers;
  int32_t draft_head = 0;        // self-speculative drafts: project onto the N most frequent tokens
  std::string draft_head_text;   // where they are counted (default: a built-in English text)
  std::string draft_head_file;   // --spec head: a trained EAGLE-style head
  double min_confidence = -1;    // --spec-min-confidence; < 0: the engine's default

  void add_to(CLI::App* cmd);
  // The flags alone (no files read).
  Result<engine::SpecOptions> to_options() const;
  // What needs the target: loads --draft-model and checks that its vocabulary is the target's,
  // and counts the drafting head's tokens.
  Status prepare(const Model& target, const Tokenizer& tokenizer, int threads, engine::SpecOptions& o) const;
};

// The file's text, or with no path a built-in English text (what the KV guard, the drafting head
// and spec-sweep measure on by default); `flag` names the option in the error.
Result<std::string> text_or_builtin(const std::string& path, const std::string& flag);

// "3,5,7-9" -> {3, 5, 7, 8, 9}, ascending and distinct.
Result<std::vector<int32_t>> parse_layer_list(const std::string& text);

// A draft model's tokenizer must give every target token id the same piece (extra draft tokens
// are never proposed).
Status check_draft_vocabulary(const Tokenizer& target, const Tokenizer& draft);

// With a quantized KV type, the basis its layers store K and V in (eval/kv_calibration.h) for
// contexts of n_positions, measured on the text at `text_path` (empty: the built-in text) and
// printed with its time; null for f16 / f32 or when not `wanted` (--kv-no-calibrate).
Result<std::shared_ptr<const KvTransform>> calibrate_kv_cache(const Model& model, const Tokenizer& tokenizer,
                                                              DType type, int64_t n_positions,
                                                              const std::string& text_path, int threads,
                                                              bool wanted = true);

// The KV cache's type, its calibration and the guard that prices it at start-up (`batch`, `serve`).
struct KvFlags {
  std::string type = "f16";
  double guard = -1;     // --kv-guard KLD: fall back layer by layer to F16 until the mean KLD is under it
  std::string guard_text;  // what calibration and the guard measure on (default: a built-in English text)
  bool no_rotate = false;
  bool no_calibrate = false;

  void add_to(CLI::App* cmd);
  // Sets the options' KV fields; with --kv-guard, measures the model first (printing the choice).
  Status apply(const Model& model, const Tokenizer& tokenizer, int threads, backends::ServingOptions& o) const;
};

// The engine flags shared by `batch` and `serve`.
struct EngineFlags {
  int32_t max_batch_tokens = 512;
  int32_t max_seqs = 64;
  std::string kv_mem;
  int64_t kv_blocks = 0;
  KvFlags kv;
  int32_t max_model_len = 0;
  int threads = 0;
  std::string device = "cpu";  // cpu, cuda or cuda:N
  double tpot_target_ms = 0;
  bool no_prefix_cache = false;
  std::string quantize;  // --quantize TYPE: the model is quantized in memory at load (load_model)
  SpecFlags spec;

  void add_to(CLI::App* cmd);
  Result<backends::ServingOptions> to_options() const;
};

}  // namespace kvasir::cli
