// Serving under SLOs, the server's part: whose a request is (its tenant, for fair share and the
// goodput metrics), its class (interactive or batch) and weight, and the TTFT deadline admission
// holds it to. The scheduler does the sharing (sched/wait_queue.h), the engine the refusing
// (engine::Engine::submit, 429 with Retry-After).
//
// The tenant is the API key (its name from the key file, else key1, key2, ...), or with
// `serve --tenant user` the request's `user` field (within its key), or with `--tenant
// header:NAME` that header's value; `--tenant none` makes everyone one tenant (FCFS).
#pragma once
#include <map>
#include <optional>
#include <string>

#include "http/message.h"
#include "server/protocol.h"

namespace kvasir::server {

// What the key file says of one key: `KEY name=N weight=W ttft_deadline_ms=MS tier=batch`.
struct KeySlo {
  std::string name;                         // the tenant's name in metrics; empty: key1, key2, ...
  double weight = 1.0;                      // fair-share weight
  std::optional<double> ttft_deadline_ms;   // this key's default deadline
  std::string service_tier;                 // this key's default tier; empty: interactive
};

enum class TenantSource { none, key, user, header };

struct SloOptions {
  double ttft_deadline_ms = 0;        // interactive requests' default deadline (0: none)
  double batch_ttft_deadline_ms = 0;  // batch requests' default deadline (0: none)
  double tpot_slo_ms = 0;             // what goodput also holds requests to (serve --tpot-target; 0: none)
  TenantSource tenant_source = TenantSource::key;
  std::string tenant_header;          // TenantSource::header
  std::map<std::string, KeySlo> keys; // by key label (key_label(i))
};

// Parses `--tenant` (none, key, user, header:NAME).
std::optional<std::string> parse_tenant_source(const std::string& text, SloOptions& out);
// Parses the settings after a key on its line of the key file ("name=a weight=2 ..."): an error
// message naming the bad setting, or nullopt.
std::optional<std::string> parse_key_slo(const std::string& settings, KeySlo& out);

// Sets gen's cache salt (tenant_salt) and resolves its SLO: tenant, weight, class, deadline.
void apply_tenancy(const SloOptions& options, const http::Request& req, GenerationRequest& gen);

}  // namespace kvasir::server
