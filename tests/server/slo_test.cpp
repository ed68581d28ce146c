// Serving under SLOs, the server's part: the key file's per-key settings, whose a request is
// (key, user, header, none), its class and deadline by precedence, and the goodput counters.
#include <gtest/gtest.h>

#include "server/generation.h"
#include "server/metrics.h"
#include "server/slo.h"

namespace kvasir::server {
namespace {

http::Request from(const std::string& principal, std::vector<std::pair<std::string, std::string>> headers = {}) {
  http::Request r;
  r.principal = principal;
  for (auto& [n, v] : headers) r.headers.add(n, v);
  return r;
}

TEST(Slo, KeySettingsParseAndBadOnesAreNamed) {
  KeySlo k;
  EXPECT_FALSE(parse_key_slo("name=alice weight=2.5 ttft_deadline_ms=1500 tier=batch", k));
  EXPECT_EQ(k.name, "alice");
  EXPECT_EQ(k.weight, 2.5);
  EXPECT_EQ(k.ttft_deadline_ms, 1500.0);
  EXPECT_EQ(k.service_tier, "batch");
  EXPECT_FALSE(parse_key_slo("", k));
  for (const char* bad : {"weight=0", "weight=-1", "weight=x", "ttft_deadline_ms=-5", "tier=gold", "colour=red", "name",
                          "name="}) {
    KeySlo b;
    auto e = parse_key_slo(bad, b);
    ASSERT_TRUE(e) << bad;
    EXPECT_FALSE(e->empty());
  }
  SloOptions o;
  EXPECT_FALSE(parse_tenant_source("header:X-Team", o));
  EXPECT_EQ(o.tenant_source, TenantSource::header);
  EXPECT_EQ(o.tenant_header, "X-Team");
  EXPECT_TRUE(parse_tenant_source("header:", o));
  EXPECT_TRUE(parse_tenant_source("everyone", o));
}

TEST(Slo, TenantClassAndDeadlineByPrecedence) {
  SloOptions o{.ttft_deadline_ms = 3000, .batch_ttft_deadline_ms = 60000};
  o.keys["key1"] = KeySlo{.name = "alice", .weight = 2};
  o.keys["key2"] = KeySlo{.ttft_deadline_ms = 500, .service_tier = "batch"};
  GenerationRequest g;
  g.user = "bob";
  apply_tenancy(o, from("key1"), g);
  EXPECT_EQ(g.slo.tenant, "alice");  // the key's name
  EXPECT_EQ(g.slo.weight, 2);
  EXPECT_FALSE(g.slo.batch);
  EXPECT_EQ(g.slo.ttft_deadline_ms, 3000);  // the server's interactive default
  EXPECT_EQ(g.cache_salt, tenant_salt(from("key1"), ""));
  // The key's tier and deadline; the request's own fields win over both.
  GenerationRequest h;
  apply_tenancy(o, from("key2"), h);
  EXPECT_EQ(h.slo.tenant, "key2");
  EXPECT_TRUE(h.slo.batch);
  EXPECT_EQ(h.slo.ttft_deadline_ms, 500);
  GenerationRequest i;
  i.service_tier = "priority";
  i.ttft_deadline_ms = 0;
  apply_tenancy(o, from("key2"), i);
  EXPECT_FALSE(i.slo.batch);
  EXPECT_EQ(i.slo.ttft_deadline_ms, 0);
  GenerationRequest j;
  j.service_tier = "flex";
  apply_tenancy(o, from(""), j);
  EXPECT_TRUE(j.slo.batch);
  EXPECT_EQ(j.slo.ttft_deadline_ms, 60000);
  // user and header tenants live within their key; none is one tenant.
  o.tenant_source = TenantSource::user;
  apply_tenancy(o, from("key1"), g);
  EXPECT_EQ(g.slo.tenant, "alice/bob");
  o.tenant_source = TenantSource::header;
  o.tenant_header = "X-Team";
  GenerationRequest k;
  apply_tenancy(o, from("", {{"X-Team", "search"}}), k);
  EXPECT_EQ(k.slo.tenant, "search");
  o.tenant_source = TenantSource::none;
  apply_tenancy(o, from("key1"), k);
  EXPECT_EQ(k.slo.tenant, "");
}

TEST(Slo, GoodputCountersPerClassAndTenant) {
  Metrics m("model");
  m.set_tpot_slo(0.1);
  auto finished = [&](const std::string& tenant, double ttft, double tpot, double deadline, const char* reason = "stop") {
    RequestRecord r;
    r.ttft_s = ttft;
    r.tpot_s = tpot;
    r.finish_reason = reason;
    r.tenant = tenant;
    r.ttft_deadline_s = deadline;
    m.observe(r);
  };
  finished("a", 0.5, 0.05, 1.0);   // met
  finished("a", 1.5, 0.05, 1.0);   // TTFT late
  finished("a", 0.5, 0.20, 1.0);   // TPOT late
  finished("a", 5.0, 0.05, 0.0);   // no deadline: met
  finished("a", 5.0, 0.05, 1.0, "abort");  // the client left: not counted
  m.record_refused("interactive", "a");
  m.record_refused("batch", "");
  const std::string text = m.render(nullptr);
  auto value = [&](const std::string& labels) {
    const std::string key = "kvasir:slo_requests_total{model_name=\"model\"," + labels + "} ";
    const size_t at = text.find(key);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + key.size()));
  };
  EXPECT_EQ(value("service_class=\"interactive\",tenant=\"a\",result=\"met\""), 2);
  EXPECT_EQ(value("service_class=\"interactive\",tenant=\"a\",result=\"missed\""), 2);
  EXPECT_EQ(value("service_class=\"interactive\",tenant=\"a\",result=\"refused\""), 1);
  EXPECT_EQ(value("service_class=\"batch\",tenant=\"default\",result=\"refused\""), 1);
  // Tenant labels are bounded.
  for (int t = 0; t < 100; ++t) finished("t" + std::to_string(t), 0.1, 0.01, 1.0);
  const std::string many = m.render(nullptr);
  EXPECT_NE(many.find("tenant=\"other\""), std::string::npos);
  EXPECT_EQ(many.find("tenant=\"t99\""), std::string::npos);
}

}  // namespace
}  // namespace kvasir::server
