#include "server/slo.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "server/generation.h"

namespace kvasir::server {
namespace {

// A tenant named by the client (user field, header) is cut here: it labels metrics and keys a map.
constexpr size_t kMaxClientTenantBytes = 128;

std::optional<double> parse_number(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

std::optional<std::string> parse_tenant_source(const std::string& text, SloOptions& out) {
  if (text == "none") out.tenant_source = TenantSource::none;
  else if (text == "key") out.tenant_source = TenantSource::key;
  else if (text == "user") out.tenant_source = TenantSource::user;
  else if (text.rfind("header:", 0) == 0 && text.size() > 7) {
    out.tenant_source = TenantSource::header;
    out.tenant_header = text.substr(7);
  } else {
    return "--tenant must be none, key, user or header:NAME, got '" + text + "'";
  }
  return std::nullopt;
}

std::optional<std::string> parse_key_slo(const std::string& settings, KeySlo& out) {
  std::istringstream in(settings);
  for (std::string item; in >> item;) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return "'" + item + "' is not name=value";
    const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    if (name == "name") {
      if (value.empty()) return "name= needs a value";
      out.name = value;
    } else if (name == "weight") {
      auto w = parse_number(value);
      if (!w || !(*w > 0) || *w > 1e6) return "weight must be a number in (0, 1e6], got '" + value + "'";
      out.weight = *w;
    } else if (name == "ttft_deadline_ms") {
      auto d = parse_number(value);
      if (!d || *d < 0 || *d > 3.6e6) return "ttft_deadline_ms must be a number in [0, 3600000], got '" + value + "'";
      out.ttft_deadline_ms = *d;
    } else if (name == "tier") {
      if (!known_service_tier(value)) return "tier must be interactive or batch (or an OpenAI service_tier), got '" + value + "'";
      out.service_tier = value;
    } else {
      return "unknown setting '" + name + "' (name, weight, ttft_deadline_ms, tier)";
    }
  }
  return std::nullopt;
}

void apply_tenancy(const SloOptions& o, const http::Request& req, GenerationRequest& gen) {
  gen.cache_salt = tenant_salt(req, gen.cache_salt);
  auto k = o.keys.find(req.principal);
  const KeySlo* key = k == o.keys.end() ? nullptr : &k->second;
  RequestSlo s;
  const std::string& tier = !gen.service_tier.empty() && gen.service_tier != "auto" ? gen.service_tier
                            : key                                                   ? key->service_tier
                                                                                    : gen.service_tier;
  s.batch = tier == "flex" || tier == "batch";
  const std::string key_name = key && !key->name.empty() ? key->name : req.principal;
  auto within_key = [&](const std::string& client) {
    const std::string part = client.substr(0, kMaxClientTenantBytes);
    if (part.empty()) return key_name;
    return key_name.empty() ? part : key_name + "/" + part;
  };
  switch (o.tenant_source) {
    case TenantSource::none: break;
    case TenantSource::key: s.tenant = key_name; break;
    case TenantSource::user: s.tenant = within_key(gen.user); break;
    case TenantSource::header: s.tenant = within_key(req.header(o.tenant_header)); break;
  }
  s.weight = key ? key->weight : 1.0;
  if (gen.ttft_deadline_ms) s.ttft_deadline_ms = double(*gen.ttft_deadline_ms);
  else if (key && key->ttft_deadline_ms) s.ttft_deadline_ms = *key->ttft_deadline_ms;
  else s.ttft_deadline_ms = s.batch ? o.batch_ttft_deadline_ms : o.ttft_deadline_ms;
  gen.slo = std::move(s);
}

}  // namespace kvasir::server
