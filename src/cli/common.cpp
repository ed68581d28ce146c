#include "cuda/cuda_runner.h"
#include "cli/common.h"

#include "eval/kv_calibration.h"
#include "eval/kv_guard.h"
#include "hub/model_ref.h"
#include "quant/quantize_file.h"
#include "spec/draft_head.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace kvasir::cli {

int fail(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

Result<std::vector<std::string>> collect_api_keys(std::vector<std::string> keys, const std::string& key_file,
                                                  std::vector<std::string>* settings) {
  if (const char* env = std::getenv("KVASIR_API_KEY"); env && *env) keys.emplace_back(env);
  if (settings) settings->assign(keys.size(), std::string());
  if (!key_file.empty()) {
    std::ifstream in(key_file);
    if (!in) return Error{"--api-key-file: cannot read " + key_file};
    for (std::string line; std::getline(in, line);) {
      while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
      size_t start = 0;
      while (start < line.size() && std::isspace(static_cast<unsigned char>(line[start]))) ++start;
      line.erase(0, start);
      if (line.empty() || line[0] == '#') continue;
      // "KEY [settings]": a key holds no space, what follows it is the serve's per-key settings.
      size_t end = 0;
      while (end < line.size() && !std::isspace(static_cast<unsigned char>(line[end]))) ++end;
      keys.push_back(line.substr(0, end));
      if (settings) settings->push_back(end < line.size() ? line.substr(end + 1) : std::string());
    }
    if (keys.empty()) return Error{"--api-key-file: " + key_file + " holds no key"};
  }
  for (const std::string& k : keys) {
    if (k.empty()) return Error{"an API key must not be empty"};
    for (char c : k)
      if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return Error{"an API key must be printable, without spaces"};
  }
  return keys;
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
  if (name == "q8_0") return DType::Q8_0;
  if (name == "q4_0") return DType::Q4_0;
  return Error{"KV type must be f16, f32, q8_0 or q4_0, not '" + name + "'"};
}

std::string model_path(const std::string& arg) {
  if (arg.empty()) return default_model_path();
  if (!hub::is_remote_ref(arg)) return arg;
  auto ref = hub::parse_model_ref(arg, hub::hf_endpoint());
  if (!ref) return arg;  // loading it fails with the file name
  const std::string cached = hub::cache_root() + "/models/" + ref->cache_rel;
  std::error_code ec;
  if (std::filesystem::exists(cached, ec)) return cached;
  std::fprintf(stderr, "kvasir: %s is not in the cache; `kvasir pull %s` downloads it\n", arg.c_str(), arg.c_str());
  return cached;
}

Result<std::unique_ptr<Model>> load_model(const std::string& path, const std::string& quantize_type, int threads) {
  if (quantize_type.empty()) return Model::load(path);
  auto ft = quant::file_type(quantize_type);
  if (!ft) return Error{"--quantize: " + ft.error(), ErrorCode::invalid_argument};
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = memfd_create("kvasir-quantized", MFD_CLOEXEC);
  if (fd < 0) return Error{std::string("--quantize: memfd_create: ") + std::strerror(errno)};
  const std::string in_memory = "/proc/self/fd/" + std::to_string(fd);
  quant::QuantizeOptions o;
  o.rules.type = *ft;
  o.num_threads = threads;
  if (auto s = quant::quantize_file(path, in_memory, o); !s) {
    ::close(fd);
    return Error{"--quantize " + quantize_type + ": " + s.error() +
                     (s.error().find("quantized") != std::string::npos ? " (--quantize takes an F32, F16 or BF16 file)" : ""),
                 ErrorCode::invalid_argument};
  }
  auto m = Model::load(in_memory);
  ::close(fd);  // the mapping keeps the bytes
  if (!m) return m;
  std::fprintf(stderr, "kvasir: quantized %s to %s in memory in %.2f s\n", path.c_str(), ft->name.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return m;
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

namespace kvasir::cli {

Result<uint64_t> parse_size(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || errno || v < 0) return Error{"bad size '" + text + "'"};
  std::string unit(end);
  for (auto& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (!unit.empty() && unit.back() == 'I') unit.pop_back();  // "MiB"
  double mult = 1;
  if (unit == "K") mult = 1024.0;
  else if (unit == "M") mult = 1024.0 * 1024;
  else if (unit == "G") mult = 1024.0 * 1024 * 1024;
  else if (!unit.empty()) return Error{"bad size unit in '" + text + "' (use K, M or G)"};
  if (v * mult > 1e15) return Error{"size '" + text + "' is too large"};
  return uint64_t(v * mult);
}

void EngineFlags::add_to(CLI::App* cmd) {
  cmd->add_option("--max-batch-tokens", max_batch_tokens, "Tokens per engine step")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--max-seqs", max_seqs, "Sequences running at once")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--kv-mem", kv_mem, "KV cache memory, e.g. 512M (default: enough for max-seqs x 2048 tokens, <= 1G)");
  cmd->add_option("--kv-blocks", kv_blocks, "Exact number of 16-token KV blocks (overrides --kv-mem)");
  kv.add_to(cmd);
  cmd->add_option("--max-model-len", max_model_len, "Prompt + generated tokens per request");
  cmd->add_option("-t,--threads", threads, "Threads (default: physical cores)");
  cmd->add_option("--device", device, "cpu, cuda or cuda:N (the CUDA runner)");
  cmd->add_flag("--no-prefix-cache", no_prefix_cache, "Disable prefix caching");
  cmd->add_option("--quantize", quantize, "Quantize an F32/F16/BF16 model in memory at load (q8_0, q4_0, q4_k_m, ...): the same bytes as `kvasir quantize`");
  cmd->add_option("--tpot-target", tpot_target_ms,
                  "Decode latency target, ms per output token: prefill joins running decodes only as far as "
                  "they stay within it (0: throughput first)")
      ->check(CLI::Range(0.0, 1e6));
  spec.add_to(cmd);
}

void SpecFlags::add_to(CLI::App* cmd) {
  cmd->add_option("--spec", method,
                  "Speculative decoding: none, ngram (drafts from the prompt and text so far), draft (--draft-model), "
                  "early-exit (the model's first --exit-layer layers), layer-skip (all but --skip-layers) or head (a "
                  "trained EAGLE-style head, --draft-head-file)");
  cmd->add_option("--spec-k", max_k, "Draft tokens per step at most (default 4; 5 with --spec head, whose confidence ends drafts sooner)")
      ->check(CLI::Range(1, 16));
  cmd->add_flag("--no-spec-auto", no_auto, "Always draft --spec-k tokens (no controller)");
  cmd->add_option("--draft-model", draft_model, "Draft model for --spec draft (implies it): a GGUF with the target's vocabulary");
  cmd->add_option("--exit-layer", exit_layer, "--spec early-exit: the draft runs layers [0, L)")->check(CLI::Range(1, 4096));
  cmd->add_option("--skip-layers", skip_layers, "--spec layer-skip: the layers the draft skips, e.g. 3,5,7-9");
  cmd->add_option("--draft-head", draft_head,
                  "Self-speculative drafts project onto the N most frequent tokens only (0: the whole vocabulary)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--draft-head-text", draft_head_text, "Text the --draft-head tokens are counted on (default: built in)");
  cmd->add_option("--draft-head-file", draft_head_file,
                  "--spec head (implied): a draft head trained for this model by `kvasir distill --head`");
  cmd->add_option("--spec-min-confidence", min_confidence,
                  "--spec head: a request stops drafting where the head's confidence in its drafts so far (the "
                  "product of its probabilities for them) falls below P (default 0.2; 0: always as many as the "
                  "controller allows)")
      ->check(CLI::Range(0.0, 1.0));
}

Result<std::string> text_or_builtin(const std::string& path, const std::string& flag) {
  if (path.empty()) return std::string(eval::kKvGuardText);
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{flag + ": cannot read " + path, ErrorCode::invalid_argument};
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Result<std::vector<int32_t>> parse_layer_list(const std::string& text) {
  std::vector<int32_t> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    int a = 0, b = 0;
    char dash = 0, extra = 0;
    const int n = std::sscanf(item.c_str(), " %d %c %d %c", &a, &dash, &b, &extra);
    if (n == 1) b = a;
    else if (!(n == 3 && dash == '-')) return Error{"cannot read '" + item + "' as layers (use e.g. 3,5,7-9)"};
    if (a < 0 || b < a || b > 4095) return Error{"bad layer range '" + item + "'"};
    for (int i = a; i <= b; ++i) out.push_back(i);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) return Error{"no layers given"};
  return out;
}

Result<engine::SpecOptions> SpecFlags::to_options() const {
  engine::SpecOptions o;
  const std::string m = method == "none" && !draft_model.empty()       ? "draft"
                        : method == "none" && !draft_head_file.empty() ? "head"
                                                                        : method;
  if (m == "ngram") o.method = engine::SpecMethod::ngram;
  else if (m == "draft") o.method = engine::SpecMethod::draft;
  else if (m == "early-exit") o.method = engine::SpecMethod::early_exit;
  else if (m == "layer-skip") o.method = engine::SpecMethod::layer_skip;
  else if (m == "head") o.method = engine::SpecMethod::head;
  else if (m != "none") return Error{"--spec: unknown method '" + method + "' (none, ngram, draft, early-exit, layer-skip, head)"};
  if (o.method == engine::SpecMethod::head && draft_head_file.empty()) return Error{"--spec head needs --draft-head-file FILE"};
  if (o.method != engine::SpecMethod::head && !draft_head_file.empty()) return Error{"--draft-head-file goes with --spec head"};
  o.head_file = draft_head_file;
  if (min_confidence >= 0 && o.method != engine::SpecMethod::head) return Error{"--spec-min-confidence goes with --spec head"};
  if (min_confidence >= 0) o.head_min_confidence = min_confidence;
  if (o.method == engine::SpecMethod::draft && draft_model.empty()) return Error{"--spec draft needs --draft-model PATH"};
  if (o.method != engine::SpecMethod::draft && !draft_model.empty()) return Error{"--draft-model goes with --spec draft"};
  if (o.method == engine::SpecMethod::early_exit && exit_layer < 1) return Error{"--spec early-exit needs --exit-layer L"};
  if (o.method != engine::SpecMethod::early_exit && exit_layer > 0) return Error{"--exit-layer goes with --spec early-exit"};
  if (o.method == engine::SpecMethod::layer_skip) {
    if (skip_layers.empty()) return Error{"--spec layer-skip needs --skip-layers LIST"};
    auto layers = parse_layer_list(skip_layers);
    if (!layers) return Error{"--skip-layers: " + layers.error()};
    o.skip_layers = std::move(*layers);
  } else if (!skip_layers.empty()) {
    return Error{"--skip-layers goes with --spec layer-skip"};
  }
  const bool self = o.method == engine::SpecMethod::early_exit || o.method == engine::SpecMethod::layer_skip;
  if (!self && (draft_head > 0 || !draft_head_text.empty()))
    return Error{"--draft-head goes with a self-speculative --spec (early-exit, layer-skip)"};
  o.exit_layer = exit_layer;
  // The head's confidence cut ends most drafts before 4 positions; where it is sure, a fifth paid
  // (1.011x the controller at K = 4, 9 interleaved rounds on the free-form prompts).
  o.max_k = max_k > 0 ? max_k : o.method == engine::SpecMethod::head ? 5 : 4;
  o.adaptive = !no_auto;
  return o;
}

Status SpecFlags::prepare(const Model& target, const Tokenizer& tokenizer, int threads, engine::SpecOptions& o) const {
  if (o.method == engine::SpecMethod::draft) {
    auto draft = load_model(model_path(draft_model), "", threads);
    if (!draft) return Error{"--draft-model: " + draft.error(), ErrorCode::invalid_argument};
    auto dtok = Tokenizer::from_gguf((*draft)->gguf());
    if (!dtok) return Error{"--draft-model: " + dtok.error(), ErrorCode::invalid_argument};
    if (auto s = check_draft_vocabulary(tokenizer, *dtok); !s) return s;
    o.draft_model = std::move(*draft);
  }
  if (draft_head > 0) {
    auto text = text_or_builtin(draft_head_text, "--draft-head-text");
    if (!text) return Error{text.error(), text.error_code()};
    o.head_tokens = spec::frequent_tokens(tokenizer.encode(*text), draft_head, tokenizer.eog_ids(),
                                          std::min<int64_t>(tokenizer.n_vocab(), target.config().n_vocab));
  }
  return {};
}

Status check_draft_vocabulary(const Tokenizer& target, const Tokenizer& draft) {
  if (draft.n_vocab() < target.n_vocab())
    return Error{"--draft-model: its vocabulary has " + std::to_string(draft.n_vocab()) + " tokens, the target's " +
                     std::to_string(target.n_vocab()) + ": a draft must share the target's tokens",
                 ErrorCode::invalid_argument};
  for (int32_t id = 0; id < target.n_vocab(); ++id)
    if (draft.piece(id) != target.piece(id))
      return Error{"--draft-model: token " + std::to_string(id) + " is '" + draft.piece(id) + "' in the draft but '" +
                       target.piece(id) + "' in the target: a draft must share the target's tokens, in the same order",
                   ErrorCode::invalid_argument};
  return {};
}

void KvFlags::add_to(CLI::App* cmd) {
  cmd->add_option("--kv-type", type, "KV cache type: f16, f32, q8_0 or q4_0 (quantized K and V are stored in a basis calibrated at start-up)");
  cmd->add_option("--kv-guard", guard,
                  "With a quantized --kv-type: measure its mean KL divergence against F16 KV at start-up and keep the "
                  "most sensitive layers in F16 until it is at most this")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--kv-guard-text", guard_text,
                  "Text the KV calibration and guard measure on (default: a built-in English text)");
  cmd->add_flag("--kv-no-rotate", no_rotate, "Store 4-bit K and V unrotated");
  cmd->add_flag("--kv-no-calibrate", no_calibrate,
                "Store quantized K and V as they are (default: in a basis measured at start-up, see docs/API.md)");
}

Result<std::shared_ptr<const KvTransform>> calibrate_kv_cache(const Model& model, const Tokenizer& tokenizer,
                                                              DType type, int64_t n_positions,
                                                              const std::string& text_path, int threads,
                                                              bool wanted) {
  if (!wanted || dtype_info(type).block_size == 1) return std::shared_ptr<const KvTransform>();
  auto text = text_or_builtin(text_path, "--kv-guard-text");
  if (!text) return Error{text.error(), text.error_code()};
  const auto t0 = std::chrono::steady_clock::now();
  auto transform = eval::calibrate_kv(model, tokenizer.encode(*text),
                                      {.n_positions = std::clamp<int64_t>(n_positions, 1, int64_t(1) << 20),
                                       .num_threads = threads, .bos = tokenizer.add_bos() ? tokenizer.bos() : -1});
  if (!transform) return Error{transform.error(), transform.error_code()};
  std::fprintf(stderr, "kvasir: KV calibration for %s: %.1f s\n", std::string(dtype_name(type)).c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return transform;
}

Status KvFlags::apply(const Model& model, const Tokenizer& tokenizer, int threads, backends::ServingOptions& o) const {
  auto t = parse_kv_type(type);
  if (!t) return Error{t.error(), ErrorCode::invalid_argument};
  o.kv.type = *t;
  o.kv.rotate_k = !no_rotate;
  const int64_t context = o.engine.max_model_len > 0 ? o.engine.max_model_len : model.config().n_ctx_train;
  auto transform = calibrate_kv_cache(model, tokenizer, *t, context, guard_text, threads, !no_calibrate);
  if (!transform) return Error{transform.error(), transform.error_code()};
  o.kv.transform = *transform;
  if (guard < 0) return {};
  if (dtype_info(*t).block_size == 1) return Error{"--kv-guard prices a quantized --kv-type (q8_0 or q4_0)", ErrorCode::invalid_argument};
  auto text = text_or_builtin(guard_text, "--kv-guard-text");
  if (!text) return Error{text.error(), text.error_code()};
  const auto tokens = tokenizer.encode(*text);
  const auto t0 = std::chrono::steady_clock::now();
  auto g = eval::kv_guard(model, tokens,
                          {.type = *t, .max_kld = guard, .rotate_k = !no_rotate, .transform = o.kv.transform, .n_ctx = std::min<int64_t>(256, int64_t(tokens.size())),
                           .num_threads = threads, .bos = tokenizer.add_bos() ? tokenizer.bos() : -1});
  if (!g) return Error{g.error(), g.error_code()};
  o.kv.layer_types = g->layer_types;
  o.kv_guard_kld = g->kld;
  std::string kept;
  for (size_t il = 0; il < g->layer_types.size(); ++il)
    if (g->layer_types[il] != *t) kept += (kept.empty() ? "" : ",") + std::to_string(il);
  std::fprintf(stderr, "kvasir: KV guard: %s everywhere costs mean KLD %.5f (budget %.5f); %lld of %zu layers %s, KLD %.5f%s%s (%.1f s)\n",
               type.c_str(), g->kld_all, guard, (long long)g->quantized_layers, g->layer_types.size(), type.c_str(),
               g->kld, kept.empty() ? "" : "; F16 in layers ", kept.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return {};
}

Result<backends::ServingOptions> EngineFlags::to_options() const {
  backends::ServingOptions o;
  o.engine.max_batch_tokens = max_batch_tokens;
  o.engine.max_seqs = std::min(max_seqs, max_batch_tokens);
  o.kv.n_blocks = kv_blocks;
  if (!kv_mem.empty()) {
    auto bytes = parse_size(kv_mem);
    if (!bytes) return Error{bytes.error()};
    o.kv.mem_bytes = *bytes;
  }
  auto type = parse_kv_type(kv.type);
  if (!type) return Error{type.error()};
  o.kv.type = *type;
  o.kv.rotate_k = !kv.no_rotate;
  o.engine.max_model_len = max_model_len;
  o.engine.num_threads = threads;
  auto dev = cuda::parse_device(device);
  if (!dev) return Error{dev.error(), dev.error_code()};
  o.device = *dev;
  o.engine.prefix_cache = !no_prefix_cache;
  o.engine.tpot_target_ms = tpot_target_ms;
  auto sp = spec.to_options();
  if (!sp) return Error{sp.error()};
  o.engine.spec = *sp;
  return o;
}

void add_sampling_flags(CLI::App* cmd, SamplingParams& s) {
  cmd->add_option("--temp", s.temperature, "Temperature (0 = greedy)");
  cmd->add_option("--top-k", s.top_k, "Top-k (0 = off)");
  cmd->add_option("--top-p", s.top_p, "Top-p (1 = off)")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--min-p", s.min_p, "Min-p (0 = off)")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repeat-penalty", s.repetition_penalty, "Repetition penalty (1 = off)");
  cmd->add_option("--presence-penalty", s.presence_penalty, "Presence penalty");
  cmd->add_option("--frequency-penalty", s.frequency_penalty, "Frequency penalty");
  cmd->add_option("--seed", s.seed, "Sampling seed");
}

}  // namespace kvasir::cli
