// `kvasir serve -m MODEL [--host H] [--port P] [--api-key K] [engine sizing]`: the OpenAI-compatible
// HTTP server. Its life is a few phases, each of which a signal ends cleanly:
//   loading   listening, /health says 503; a load error is printed and the exit code is 1; a
//             SIGTERM/SIGINT exits at once (code 0).
//   ready     serving until SIGTERM/SIGINT.
//   draining  new generations get 503, running ones finish until --drain-timeout, then the rest
//             are aborted (their clients get a clean end) and it exits 0. A second signal exits
//             at once (code 1).
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>

#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "cli/commands.h"
#include "cli/common.h"
#include "backends/engine_factory.h"
#include "cuda/cuda_runner.h"
#include "hub/model_ref.h"
#include "server/backend.h"
#include "server/server.h"

namespace kvasir::cli {
namespace {

struct ServeArgs {
  std::string model;
  std::vector<std::string> loras;  // --lora NAME=FILE
  std::string ollama_models;       // --ollama-models DIR
  std::string device = "cpu";
  std::string chat_template;
  std::string pooling;
  std::string json_whitespace = "bounded";
  int32_t default_max_tokens = 0;
  std::string kv_mem;
  std::string kv_disk, kv_disk_size = "20G";  // --kv-disk DIR --kv-disk-size
  std::string kv_store;                        // --kv-store redis://HOST:PORT
  KvFlags kv;
  std::string max_body = "8M";
  int64_t kv_blocks = 0;
  int32_t max_seqs = 64;
  int32_t max_batch_tokens = 512;
  int32_t max_model_len = 0;
  int threads = 0;
  std::string quantize;
  bool no_prefix_cache = false;
  double tpot_target_ms = 0;
  bool kv_reserve = false;
  std::string tenant = "key";
  double drain_timeout_s = 30;
  SpecFlags spec;
  std::vector<std::string> api_keys;
  std::string api_key_file;
  server::ServerOptions http;
  std::string role = "both";            // prefill, decode or both (colocated)
  std::string kv_listen = "127.0.0.1:0";  // decode: the UCX listener prefill instances send KV to
  int64_t kv_transfer_timeout_ms = 5000;
  int32_t disagg_min_tokens = 64;
  std::vector<std::string> prefill_peers;
};

// "HOST:PORT" (port 0: any free one).
Result<std::pair<std::string, uint16_t>> parse_host_port(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return Error{"--kv-listen wants HOST:PORT, got '" + text + "'"};
  try {
    const int port = std::stoi(text.substr(colon + 1));
    if (port < 0 || port > 65535) throw std::out_of_range("port");
    return std::pair<std::string, uint16_t>{text.substr(0, colon), uint16_t(port)};
  } catch (const std::exception&) {
    return Error{"--kv-listen wants HOST:PORT, got '" + text + "'"};
  }
}

// Every idle connection is a descriptor: use as many as the hard limit allows.
void raise_descriptor_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

size_t descriptor_limit() {
  rlimit r{};
  return getrlimit(RLIMIT_NOFILE, &r) == 0 ? size_t(r.rlim_cur) : 1024;
}

// SIGTERM / SIGINT, taken by sigwait on a thread of their own so that every phase hears them.
// Made with new and never deleted: its thread waits until the process exits; disarm() before the
// server state goes away turns any later signal into a plain exit.
class SignalWatch {
 public:
  SignalWatch(sigset_t set, const server::ServerState& state) : set_(set), state_(&state) {
    std::thread([this] { run(); }).detach();
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    state_ = nullptr;
  }
  int wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return signal_ != 0; });
    return signal_;
  }

 private:
  void run() {
    for (int count = 0;; ++count) {
      int sig = 0;
      if (sigwait(&set_, &sig) != 0) continue;
      const char* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
      std::unique_lock<std::mutex> lock(mutex_);
      if (!state_) std::_Exit(0);  // after the server stopped
      if (state_->phase() == server::Phase::loading) {
        std::fprintf(stderr, "kvasir serve: %s while loading, stopped\n", name);
        std::_Exit(0);
      }
      if (count > 0) {
        std::fprintf(stderr, "kvasir serve: second %s, exiting without draining\n", name);
        std::_Exit(1);
      }
      signal_ = sig;
      lock.unlock();
      cv_.notify_all();
    }
  }
  sigset_t set_;
  const server::ServerState* state_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int signal_ = 0;
};

// "512M", "2G", "64k", "1048576" -> bytes (binary units).
Result<uint64_t> parse_size(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    return Error{flag + ": expected a size like 512M, got '" + text + "'"};
  }
  std::string unit = text.substr(used);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b') && unit.size() > 1) unit.pop_back();
  double mult = 1;
  if (unit.empty() || unit == "B" || unit == "b") mult = 1;
  else if (unit.size() == 1 && std::toupper(unit[0]) == 'K') mult = 1024.0;
  else if (unit.size() == 1 && std::toupper(unit[0]) == 'M') mult = 1024.0 * 1024;
  else if (unit.size() == 1 && std::toupper(unit[0]) == 'G') mult = 1024.0 * 1024 * 1024;
  else return Error{flag + ": unknown unit in '" + text + "' (use K, M or G)"};
  if (!(v >= 0) || v * mult > 1e15) return Error{flag + ": size out of range: '" + text + "'"};
  return uint64_t(v * mult);
}

int run_serve(ServeArgs a) {
  a.model = model_path(a.model);
  // Said before the port is taken and "listening" printed: a missing file is the commonest mistake.
  if (std::error_code ec; !std::filesystem::exists(a.model, ec))
    return fail("cannot open '" + a.model + "': no such file (a GGUF file, or a model `kvasir pull` fetched)");
  if (std::error_code ec; std::filesystem::is_directory(a.model, ec))
    return fail("'" + a.model + "' is a directory, not a GGUF file");
  auto kv_type = parse_kv_type(a.kv.type);
  if (!kv_type) return fail(kv_type.error());
  auto spec = a.spec.to_options();
  if (!spec) return fail(spec.error());
  uint64_t kv_mem = 0;
  if (!a.kv_mem.empty()) {
    auto m = parse_size(a.kv_mem, "--kv-mem");
    if (!m) return fail(m.error());
    kv_mem = *m;
  }
  auto body = parse_size(a.max_body, "--max-body");
  if (!body) return fail(body.error());
  a.http.max_body_bytes = size_t(*body);
  std::vector<std::string> key_settings;
  auto keys = collect_api_keys(a.api_keys, a.api_key_file, &key_settings);
  if (!keys) return fail(keys.error());
  for (size_t i = 0; i < keys->size(); ++i) {
    server::KeySlo k;
    if (auto e = server::parse_key_slo(key_settings[i], k)) return fail("--api-key-file: key " + std::to_string(i + 1) + ": " + *e);
    a.http.slo.keys[server::key_label(i)] = std::move(k);
  }
  a.http.access.api_keys = std::move(*keys);
  if (auto e = server::parse_tenant_source(a.tenant, a.http.slo)) return fail(*e);
  a.http.slo.tpot_slo_ms = a.tpot_target_ms;
  raise_descriptor_limit();
  // Request bodies and their copies are megabytes at most and short-lived: from 1 MiB on they get
  // their own mappings, returned to the system when freed. (glibc's default threshold rises with
  // every such free, after which large buffers stay in the worker threads' arenas for good.)
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  a.http.max_connections = std::min(a.http.max_connections, std::max<size_t>(descriptor_limit(), 128) - 64);
  if (a.http.served_model_name.empty()) a.http.served_model_name = std::filesystem::path(a.model).stem().string();

  // Signals are taken by sigwait below; block them before any thread starts so none inherits them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server

  server::HttpServer http(a.http);
  if (auto s = http.bind(); !s) return fail(s.error());
  http.start();
  SignalWatch& signals = *new SignalWatch(stop_signals, http.state());
  std::fprintf(stderr, "kvasir serve: listening on http://%s:%d (loading %s)\n", a.http.host.c_str(), http.port(),
               a.model.c_str());

  server::BackendOptions bo{.model_path = a.model, .chat_template_path = a.chat_template, .pooling = a.pooling};
  bo.json_whitespace = a.json_whitespace == "any" ? grammar::JsonWhitespace::any : grammar::JsonWhitespace::bounded;
  bo.default_max_tokens = a.default_max_tokens;
  bo.served_name = a.http.served_model_name;
  bo.ollama_models_dir = a.ollama_models.empty() ? hub::cache_root() + "/ollama" : a.ollama_models;
  for (const std::string& flag : a.loras) {
    auto l = server::parse_lora_flag(flag);
    if (!l) return fail(l.error());
    bo.loras.push_back(*l);
  }
  bo.prefill_role = a.role == "prefill";
  bo.decode_role = a.role == "decode";
  if (bo.decode_role) {
    auto listen = parse_host_port(a.kv_listen);
    if (!listen) return fail(listen.error());
    bo.pull = {.listen_host = listen->first,
               .listen_port = listen->second,
               .timeout = std::chrono::milliseconds(a.kv_transfer_timeout_ms),
               .min_tokens = a.disagg_min_tokens,
               .api_key = a.http.access.api_keys.empty() ? std::string() : a.http.access.api_keys[0],
               .allowed_prefill = a.prefill_peers};
  }
  bo.serving.engine.max_seqs = a.max_seqs;
  bo.serving.engine.max_batch_tokens = a.max_batch_tokens;
  bo.serving.kv.n_blocks = a.kv_blocks;
  bo.serving.kv.mem_bytes = kv_mem;
  bo.serving.kv.populate_in_background = true;  // ready in a second; the pool is committed meanwhile
  bo.serving.kv.type = *kv_type;
  bo.prepare_engine = [a](const Model& m, const Tokenizer& t, backends::ServingOptions& o) -> Status {
    if (auto s = a.kv.apply(m, t, a.threads, o); !s) return s;
    return a.spec.prepare(m, t, a.threads, o.engine.spec);
  };
  bo.serving.engine.max_model_len = a.max_model_len;
  bo.serving.engine.num_threads = a.threads;
  auto device = cuda::parse_device(a.device);
  if (!device) return fail(device.error());
  bo.serving.device = *device;
  if (!a.quantize.empty()) bo.load_model = [a] { return load_model(a.model, a.quantize, a.threads); };
  bo.serving.engine.prefix_cache = !a.no_prefix_cache;
  if (!a.kv_disk.empty()) {
    auto size = parse_size(a.kv_disk_size, "--kv-disk-size");
    if (!size) return fail(size.error());
    bo.serving.engine.kv_disk_dir = a.kv_disk;
    bo.serving.engine.kv_disk_bytes = *size;
  }
  bo.serving.engine.kv_store_url = a.kv_store;
  bo.serving.engine.tpot_target_ms = a.tpot_target_ms;
  bo.serving.engine.reserve_kv = a.kv_reserve;
  bo.serving.engine.spec = *spec;
  const auto t0 = std::chrono::steady_clock::now();
  auto backend = server::load_backend(bo);
  if (!backend) {
    http.state().set_phase(server::Phase::failed);
    const int code = fail(backend.error());  // said first: stopping may take a moment
    http.stop();
    signals.disarm();
    return code;
  }
  const int32_t max_len = (*backend)->max_model_len;
  std::fprintf(stderr, "kvasir serve: chat template: %s\n", (*backend)->chat.origin().c_str());
  std::fprintf(stderr, "kvasir serve: embeddings: %s\n", (*backend)->pooling.origin.c_str());
  if ((*backend)->puller)
    std::fprintf(stderr, "kvasir serve: decode role, KV listener on %s:%u\n", bo.pull.listen_host.c_str(),
                 unsigned((*backend)->puller->port()));
  if ((*backend)->pusher) std::fprintf(stderr, "kvasir serve: prefill role\n");
  http.state().attach(std::move(*backend));
  std::fprintf(stderr, "kvasir serve: model '%s' ready in %.2f s (max_model_len %d)\n",
               a.http.served_model_name.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), max_len);

  const int sig = signals.wait();
  std::fprintf(stderr, "kvasir serve: %s, draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  http.drain_and_stop(std::chrono::milliseconds(int64_t(a.drain_timeout_s * 1000)));
  signals.disarm();
  std::fprintf(stderr, "kvasir serve: stopped\n");
  return 0;
}

}  // namespace

void register_serve(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  cmd->add_option("-m,--model", a->model, "GGUF model (default: the installed Gemma 3 270M)");
  cmd->add_option("--host", a->http.host, "Address to listen on (default 127.0.0.1: loopback only)");
  cmd->add_option("--port", a->http.port, "Port (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", a->api_keys,
                  "Require 'Authorization: Bearer KEY' on the API (repeatable; visible in ps: prefer "
                  "--api-key-file or KVASIR_API_KEY)");
  cmd->add_option("--api-key-file", a->api_key_file, "File of API keys, one per line");
  cmd->add_flag("--metrics-public", a->http.access.metrics_public, "Serve /metrics without the API key");
  cmd->add_option("--allowed-hosts", a->http.access.allowed_hosts,
                  "Host header values accepted, comma separated, '*' for any (default: loopback names when "
                  "listening on loopback, else any)")
      ->delimiter(',');
  cmd->add_option("--cors-origin", a->http.access.cors_origins,
                  "Origins whose browser pages may call the API (repeatable or comma separated; '*' for any)")
      ->delimiter(',');
  cmd->add_option("--max-connections", a->http.max_connections, "Open connections at most")
      ->check(CLI::Range(size_t(1), size_t(1) << 20));
  cmd->add_option("--served-model-name", a->http.served_model_name, "Model id in the API (default: file stem)");
  cmd->add_option("--lora", a->loras,
                  "Serve a LoRA adapter (llama.cpp's GGUF format) as model NAME: NAME=FILE (repeatable; requests "
                  "that name different adapters share a batch)");
  cmd->add_option_function<std::string>(
         "--rerank", [a](const std::string& v) { a->http.rerank_generative = v == "generative"; },
         "How /v1/rerank and /v1/score score: embedding (cosine of the pooled embeddings) or generative (the model "
         "judges each pair yes/no, as Qwen3-Reranker)")
      ->check(CLI::IsMember({"embedding", "generative"}))
      ->default_str("embedding");
  cmd->add_option("--ollama-models", a->ollama_models,
                  "Folder of the models Ollama's /api/create, /api/copy and /api/pull make (default: kvasir's cache/ollama)");
  cmd->add_flag("--allow-runtime-lora", a->http.allow_runtime_lora,
                "Answer /v1/load_lora_adapter and /v1/unload_lora_adapter (they read files the request names)");
  cmd->add_option("--pooling", a->pooling, "Embeddings: mean, cls or last (default: the model file's; mean when it declares none)")
      ->check(CLI::IsMember({"mean", "cls", "last"}));
  cmd->add_option("--default-max-tokens", a->default_max_tokens,
                  "Tokens generated for a request that names no max_tokens (num_predict, max_output_tokens); 0: "
                  "OpenAI's defaults (16 for completions, the rest of the context for chat)")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option_function<std::string>(
         "--metrics-prefix", [a](const std::string& v) { a->http.metrics_prefix = v + ":"; },
         "Prefix of /metrics' families: kvasir, or vllm (vLLM's names, for its dashboards)")
      ->check(CLI::IsMember({"kvasir", "vllm"}))
      ->default_str("kvasir");
  cmd->add_option("--json-whitespace", a->json_whitespace,
                  "Whitespace JSON grammars (response_format, tools) allow: bounded (a space, or a line break and a "
                  "short indent) or any (any run of blanks, where a model may spin)")
      ->check(CLI::IsMember({"bounded", "any"}))
      ->capture_default_str();
  cmd->add_option("--chat-template", a->chat_template, "Jinja chat template file, or a built-in's name: chatml, gemma, llama2, llama3, mistral, phi3, plain (default: the model's own, else its family's built-in)");
  cmd->add_option("--max-seqs", a->max_seqs, "Sequences in a batch at most")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-batch-tokens", a->max_batch_tokens, "Tokens per engine step at most")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-model-len", a->max_model_len, "Context per sequence (default: the model's, if KV fits)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--kv-mem", a->kv_mem, "KV-cache budget, e.g. 512M or 2G");
  cmd->add_option("--kv-blocks", a->kv_blocks, "Exact number of KV blocks (overrides --kv-mem)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 32));
  a->kv.add_to(cmd);
  cmd->add_flag("--no-prefix-cache", a->no_prefix_cache, "Disable prefix caching");
  cmd->add_option("--kv-disk", a->kv_disk,
                  "A disk tier for the prefix cache: full KV blocks kept in this folder (written as they are "
                  "computed, read back instead of recomputed; kept across restarts)");
  cmd->add_option("--kv-store", a->kv_store,
                  "A Redis/Valkey server (redis://HOST:PORT) every instance of the model shares KV blocks through "
                  "(after --kv-disk when both are given)");
  cmd->add_option("--kv-disk-size", a->kv_disk_size, "The disk tier's size bound, e.g. 20G (least recently used files go first)")
      ->capture_default_str();
  cmd->add_option("--tpot-target", a->tpot_target_ms,
                  "Decode latency target, ms per output token: prefill joins running decodes only as far as "
                  "they stay within it (0: throughput first)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--ttft-deadline-ms", a->http.slo.ttft_deadline_ms,
                  "Interactive requests' TTFT deadline: a request whose first token is forecast later is refused at "
                  "once (429 + Retry-After) instead of queued; a request's ttft_deadline_ms or its key's overrides it "
                  "(0: none, everything queues)")
      ->check(CLI::Range(0.0, 3.6e6));
  cmd->add_option("--batch-ttft-deadline-ms", a->http.slo.batch_ttft_deadline_ms,
                  "The same for batch requests (service_tier flex or batch; 0: none)")
      ->check(CLI::Range(0.0, 3.6e6));
  cmd->add_option("--tenant", a->tenant,
                  "Whose a request is, for fair share and the goodput metrics: key (the API key), user (the "
                  "request's user field, within its key), header:NAME, or none (one tenant: FCFS)")
      ->capture_default_str();
  cmd->add_flag("--kv-reserve", a->kv_reserve,
                "Admit a request only when the KV of its whole answer (prompt + max_tokens) fits beside the running "
                "ones: preemption becomes rare, concurrency lower");
  cmd->add_option("-t,--threads", a->threads, "Compute threads (default: physical cores)");
  cmd->add_option("--device", a->device, "cpu, cuda or cuda:N (the CUDA runner)");
  cmd->add_option("--quantize", a->quantize, "Quantize an F32/F16/BF16 model in memory at load (q8_0, q4_0, q4_k_m, ...): the same bytes as `kvasir quantize`");
  a->spec.add_to(cmd);
  cmd->add_option("--max-body", a->max_body, "Largest request body, e.g. 8M (bigger: 413)");
  cmd->add_option("--http-threads", a->http.http_threads, "Worker threads for requests in progress; each stream holds one (default 256)")
      ->check(CLI::Range(1, 8192));
  cmd->add_option("--role", a->role,
                  "prefill: answers /internal/kv/prefill (computes prompts, sends their KV to decode instances); "
                  "decode: pulls a prompt's KV from the prefill instance the router names; both (default): neither")
      ->check(CLI::IsMember({"prefill", "decode", "both"}));
  cmd->add_option("--kv-listen", a->kv_listen, "decode role: HOST:PORT of the UCX listener for KV (port 0: any free one)");
  cmd->add_option("--kv-transfer-timeout", a->kv_transfer_timeout_ms,
                  "decode role: milliseconds a KV pull may take, prefill included; then the prompt is computed here")
      ->check(CLI::Range(int64_t(1), int64_t(600000)));
  cmd->add_option("--prefill-peer", a->prefill_peers,
                  "decode role: a prefill instance (http://host:port) the router may name; repeatable (default: any)");
  cmd->add_option("--disagg-min-tokens", a->disagg_min_tokens, "decode role: shorter prompts are computed here")
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--drain-timeout", a->drain_timeout_s, "Seconds the whole shutdown may take: running generations are aborted when it expires");
  cmd->callback([&handler, a] { handler = [a] { return run_serve(*a); }; });
}

}  // namespace kvasir::cli
