// The prefill request a decode instance sends: it round-trips, and every field that is missing,
// of the wrong type or out of range is refused with an error naming the field.
#include <gtest/gtest.h>

#include "disagg/prefill_service.h"

namespace kvasir::disagg {
namespace {

using J = nlohmann::ordered_json;

PrefillRequest valid() {
  return {.transfer_id = 77,
          .tokens = {1, 2, 3, 4, 5},
          .cache_salt = "key1",
          .skip_blocks = 0,
          .kv_format = "llama@0123|cpu|bs16",
          .target_host = "127.0.0.1",
          .target_port = 4000,
          .timeout = std::chrono::milliseconds(2500)};
}

TEST(PrefillRequest, RoundTrips) {
  const J j = J::parse(to_json(valid()).dump());
  auto r = parse_prefill_request(j);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->transfer_id, 77u);
  EXPECT_EQ(r->tokens, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(r->cache_salt, "key1");
  EXPECT_EQ(r->kv_format, "llama@0123|cpu|bs16");
  EXPECT_EQ(r->target_host, "127.0.0.1");
  EXPECT_EQ(r->target_port, 4000);
  EXPECT_EQ(r->timeout.count(), 2500);
}

TEST(PrefillRequest, HostileFieldsAreNamed) {
  const J good = J::parse(to_json(valid()).dump());
  const std::vector<std::pair<std::string, J>> cases = {
      {"transfer_id", -1},       {"transfer_id", "7"},      {"tokens", J::array()},
      {"tokens", J{1, -2}},      {"tokens", J{1, 1e12}},    {"tokens", J{1, "x"}},
      {"skip_blocks", 6},        {"skip_blocks", -1},       {"kv_format", 5},
      {"target_host", ""},       {"target_port", 0},        {"target_port", 70000},
      {"timeout_ms", 0},         {"timeout_ms", 3600001},   {"cache_salt", J::array()}};
  for (const auto& [field, value] : cases) {
    J j = good;
    j[field] = value;
    auto r = parse_prefill_request(j);
    ASSERT_FALSE(r.ok()) << field << " = " << value.dump();
    EXPECT_NE(r.error().find(field), std::string::npos) << r.error();
    EXPECT_EQ(r.error_code(), ErrorCode::invalid_argument) << field;
  }
  for (const char* field : {"transfer_id", "tokens", "skip_blocks", "kv_format", "target_host", "target_port"}) {
    J j = good;
    j.erase(field);
    auto r = parse_prefill_request(j);
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_NE(r.error().find(field), std::string::npos) << r.error();
  }
  EXPECT_FALSE(parse_prefill_request(J::array()).ok());
}

}  // namespace
}  // namespace kvasir::disagg
