// kvasir router: one OpenAI-compatible endpoint in front of prefill, decode and colocated
// instances (router/router_server.h).
#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include "cli/commands.h"
#include "cli/common.h"
#include "router/router_server.h"

namespace kvasir::cli {
namespace {

struct RouterArgs {
  router::RouterOptions options;
  std::vector<std::string> prefill, decode, backend, api_keys;
  std::string api_key_file;
  int64_t upstream_timeout_ms = 120000, health_interval_ms = 1000;
};

Result<std::string> check_url(const std::string& url) {
  if (url.rfind("http://", 0) != 0 || url.size() <= 7 || url.find('/', 7) != std::string::npos)
    return Error{"instance URLs look like http://host:port, got '" + url + "'"};
  return url;
}

int run_router(RouterArgs a) {
  for (auto [urls, role] : {std::pair{&a.prefill, router::Role::prefill}, std::pair{&a.decode, router::Role::decode},
                            std::pair{&a.backend, router::Role::both}})
    for (const std::string& u : *urls) {
      auto url = check_url(u);
      if (!url) return fail(url.error());
      a.options.instances.push_back({*url, role});
    }
  if (a.decode.empty() && a.backend.empty()) return fail("kvasir router needs a --decode or --backend instance");
  if (!a.prefill.empty() && a.decode.empty()) return fail("--prefill instances need --decode instances to send KV to");
  auto keys = collect_api_keys(a.api_keys, a.api_key_file);
  if (!keys) return fail(keys.error());
  a.options.access.api_keys = std::move(*keys);
  if (const char* k = std::getenv("KVASIR_UPSTREAM_API_KEY"); k && *k) a.options.upstream_api_key = k;
  a.options.upstream_timeout = std::chrono::milliseconds(a.upstream_timeout_ms);
  a.options.health_interval = std::chrono::milliseconds(a.health_interval_ms);

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  router::RouterServer server(a.options);
  if (auto s = server.bind(); !s) return fail(s.error());
  server.start();
  std::fprintf(stderr, "kvasir router: listening on %s:%d, %zu instances\n", a.options.host.c_str(), server.port(),
               a.options.instances.size());
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "kvasir router: %s, stopping\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  server.stop();
  return 0;
}

}  // namespace

void register_router(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<RouterArgs>();
  auto* cmd = app.add_subcommand("router", "One OpenAI-compatible endpoint in front of prefill, decode and colocated instances");
  cmd->add_option("--prefill", a->prefill, "A prefill instance (serve --role prefill), http://host:port; repeatable");
  cmd->add_option("--decode", a->decode, "A decode instance (serve --role decode); repeatable");
  cmd->add_option("--backend", a->backend, "A colocated instance (serve, --role both), any model; repeatable");
  cmd->add_option("--host", a->options.host, "Address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", a->options.port, "Port (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", a->api_keys, "Require 'Authorization: Bearer KEY' (repeatable; prefer KVASIR_API_KEY)");
  cmd->add_option("--api-key-file", a->api_key_file, "File of API keys, one per line");
  cmd->add_flag("--metrics-public", a->options.access.metrics_public, "Serve /metrics without the API key");
  cmd->add_option("--allowed-hosts", a->options.access.allowed_hosts, "Host header values accepted, comma separated")
      ->delimiter(',');
  cmd->add_option("--upstream-api-key", a->options.upstream_api_key,
                  "Key sent to the instances (default: the client's own Authorization; or KVASIR_UPSTREAM_API_KEY)");
  cmd->add_option("--upstream-timeout", a->upstream_timeout_ms,
                  "Milliseconds of silence from an instance before the request is placed elsewhere or ended")
      ->check(CLI::Range(int64_t(100), int64_t(3600000)));
  cmd->add_option("--health-interval", a->health_interval_ms, "Milliseconds between health checks")
      ->check(CLI::Range(int64_t(50), int64_t(600000)));
  cmd->add_option("--affinity-slack", a->options.affinity_slack,
                  "Requests more than the least busy instance that a prompt's affine instance may run and still get it")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  cmd->add_option("--pooled-affinity-slack", a->options.pooled_affinity_slack,
                  "The same, when the less busy instance shares the affine one's KV pool (serve --kv-store)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  cmd->add_option("--max-attempts", a->options.max_attempts, "Instances tried per request")->check(CLI::Range(1, 16));
  cmd->callback([&handler, a] { handler = [a] { return run_router(*a); }; });
}

}  // namespace kvasir::cli
