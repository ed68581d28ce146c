// The official JSON-Schema-Test-Suite (Debian's json-schema-test-suite, draft 7) run as data.
// Soundness: for every case whose schema compiles, no instance the suite marks invalid is a
// document of the grammar (written compactly, as the model could write it). Valid instances need
// not be admitted (the grammar produces a subset: schema order, no extra members), but how many
// are is printed. Skips where the package is not installed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"

using namespace kvasir::grammar;
using json = nlohmann::ordered_json;

namespace {

const char* kSuite = "/usr/share/json-schema-test-suite/tests/draft7";

// The keywords the compiler claims; each has a file of cases in the suite.
const char* kFiles[] = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
                        "enum", "const", "anyOf", "oneOf", "allOf", "ref", "definitions", "minLength", "maxLength",
                        "pattern", "boolean_schema", "default", "minimum", "maximum", "exclusiveMinimum",
                        "exclusiveMaximum", "multipleOf", "optional/format/date", "optional/format/time",
                        "optional/format/date-time", "optional/format/email", "optional/format/uri",
                        "optional/format/ipv4"};

}  // namespace

TEST(SchemaSuite, NoInvalidInstanceIsADocument) {
  if (!std::filesystem::exists(kSuite)) GTEST_SKIP() << "json-schema-test-suite is not installed";
  auto vocab = std::make_shared<TokenIndex>(std::vector<std::string>{"x"});
  int cases = 0, compiled = 0, invalid_checked = 0, valid_total = 0, valid_admitted = 0;
  for (const char* name : kFiles) {
    std::ifstream in(std::string(kSuite) + "/" + name + ".json");
    ASSERT_TRUE(in) << name;
    const json groups = json::parse(in);
    for (const json& group : groups) {
      ++cases;
      auto g = compile_json_schema(group["schema"]);
      if (!g) continue;  // a feature the compiler refuses by name: nothing to check
      ++compiled;
      auto cg = compile(std::move(*g), vocab);
      for (const json& t : group["tests"]) {
        const std::string text = t["data"].dump(-1, ' ', false, json::error_handler_t::replace);
        Matcher m(cg);
        const bool admitted = m.accept_bytes(text) && m.can_end();
        if (t["valid"].get<bool>()) {
          ++valid_total;
          valid_admitted += admitted;
        } else {
          ++invalid_checked;
          EXPECT_FALSE(admitted) << name << ": " << group["description"] << " / " << t["description"] << "\n  schema "
                                 << group["schema"].dump() << "\n  data " << text;
        }
      }
    }
  }
  std::printf("suite: %d cases, %d compiled; %d invalid instances refused-checked; %d of %d valid ones admitted\n",
              cases, compiled, invalid_checked, valid_admitted, valid_total);
  EXPECT_GT(compiled, cases / 2);
  EXPECT_GT(invalid_checked, 60);
}
