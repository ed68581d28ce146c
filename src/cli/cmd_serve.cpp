// `kvasir serve -m MODEL [--host H] [--port P] [--api-key K] [engine sizing]`: the OpenAI-compatible
// HTTP server. It listens before the model loads (/health says 503 until then) and drains on
// SIGTERM or SIGINT: running requests finish, new ones get 503, then it exits 0.
#include <signal.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/common.h"
#include "server/backend.h"
#include "server/server.h"

namespace kvasir::cli {
namespace {

struct ServeArgs {
  std::string model;
  std::string chat_template;
  std::string kv_mem;
  std::string kv_type = "f16";
  std::string max_body = "8M";
  int64_t kv_blocks = 0;
  int32_t max_seqs = 64;
  int32_t max_batch_tokens = 512;
  int32_t max_model_len = 0;
  int threads = 0;
  bool no_prefix_cache = false;
  double tpot_target_ms = 0;
  double drain_timeout_s = 30;
  server::ServerOptions http;
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
  if (a.model.empty()) a.model = default_model_path();
  auto kv_type = parse_kv_type(a.kv_type);
  if (!kv_type) return fail(kv_type.error());
  uint64_t kv_mem = 0;
  if (!a.kv_mem.empty()) {
    auto m = parse_size(a.kv_mem, "--kv-mem");
    if (!m) return fail(m.error());
    kv_mem = *m;
  }
  auto body = parse_size(a.max_body, "--max-body");
  if (!body) return fail(body.error());
  a.http.max_body_bytes = size_t(*body);
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
  std::fprintf(stderr, "kvasir serve: listening on http://%s:%d (loading %s)\n", a.http.host.c_str(), http.port(),
               a.model.c_str());

  server::BackendOptions bo{.model_path = a.model, .chat_template_path = a.chat_template};
  bo.engine.max_seqs = a.max_seqs;
  bo.engine.max_batch_tokens = a.max_batch_tokens;
  bo.engine.kv_blocks = a.kv_blocks;
  bo.engine.kv_mem_bytes = kv_mem;
  bo.engine.kv_type = *kv_type;
  bo.engine.max_model_len = a.max_model_len;
  bo.engine.num_threads = a.threads;
  bo.engine.prefix_cache = !a.no_prefix_cache;
  bo.engine.tpot_target_ms = a.tpot_target_ms;
  const auto t0 = std::chrono::steady_clock::now();
  auto backend = server::load_backend(bo);
  if (!backend) {
    http.state().set_phase(server::Phase::failed);
    http.stop();
    return fail(backend.error());
  }
  const int32_t max_len = (*backend)->max_model_len;
  http.state().attach(std::move(*backend));
  std::fprintf(stderr, "kvasir serve: model '%s' ready in %.2f s (max_model_len %d)\n",
               a.http.served_model_name.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), max_len);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "kvasir serve: %s, draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  http.drain_and_stop(std::chrono::milliseconds(int64_t(a.drain_timeout_s * 1000)));
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
  cmd->add_option("--api-key", a->http.api_key, "Require 'Authorization: Bearer KEY' on the API");
  cmd->add_option("--served-model-name", a->http.served_model_name, "Model id in the API (default: file stem)");
  cmd->add_option("--chat-template", a->chat_template, "Jinja chat template file (default: the model's own)");
  cmd->add_option("--max-seqs", a->max_seqs, "Sequences in a batch at most")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-batch-tokens", a->max_batch_tokens, "Tokens per engine step at most")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-model-len", a->max_model_len, "Context per sequence (default: the model's, if KV fits)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--kv-mem", a->kv_mem, "KV-cache budget, e.g. 512M or 2G");
  cmd->add_option("--kv-blocks", a->kv_blocks, "Exact number of KV blocks (overrides --kv-mem)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 32));
  cmd->add_option("--kv-type", a->kv_type, "KV cache type: f16 or f32");
  cmd->add_flag("--no-prefix-cache", a->no_prefix_cache, "Disable prefix caching");
  cmd->add_option("--tpot-target", a->tpot_target_ms,
                  "Decode latency target, ms per output token: prefill joins running decodes only as far as "
                  "they stay within it (0: throughput first)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("-t,--threads", a->threads, "Compute threads (default: physical cores)");
  cmd->add_option("--max-body", a->max_body, "Largest request body, e.g. 8M (bigger: 413)");
  cmd->add_option("--http-threads", a->http.http_threads, "HTTP worker threads; each stream holds one (default 256)")
      ->check(CLI::Range(1, 8192));
  cmd->add_option("--drain-timeout", a->drain_timeout_s, "Seconds to wait for responses in flight on shutdown");
  cmd->callback([&handler, a] { handler = [a] { return run_serve(*a); }; });
}

}  // namespace kvasir::cli
