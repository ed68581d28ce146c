// The grammar engine against independent references: a backtracking recognizer over the Grammar
// (written from the definition, no stacks shared with the matcher) decides "is this text a
// prefix of some document", and the token mask must agree with it for every token of a small
// vocabulary, at every step of many random walks.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <random>
#include <set>

#include "grammar/gbnf.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex_gbnf.h"
#include "grammar/utf8_decode.h"

using namespace kvasir::grammar;
using json = nlohmann::ordered_json;

namespace {

// Code points of UTF-8 text; nullopt-like empty + flag when not valid (a partial tail is kept
// apart so the reference can reason about it).
struct Decoded {
  std::vector<uint32_t> cps;
  std::string tail;  // an incomplete last character
  bool valid = true;
};
Decoded decode(std::string_view s) {
  Decoded d;
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp = 0;
    const size_t n = decode_utf8(s.substr(i), cp);
    if (n == 0) {
      Utf8Partial p;
      size_t j = i;
      while (j < s.size() && p.step(uint8_t(s[j])) && p.in_progress()) ++j;
      if (j == s.size() && p.in_progress() && p.lo() <= p.hi()) d.tail = std::string(s.substr(i));
      else d.valid = false;
      return d;
    }
    d.cps.push_back(cp);
    i += n;
  }
  return d;
}

// Reference: can the grammar derive a string that starts with `cps` (then, when `tail` is
// non-empty, a character whose encoding starts with it)? Exhaustive search over (symbol list,
// input position) with memoization-free backtracking; fine for short inputs and small grammars.
class Reference {
 public:
  explicit Reference(const Grammar& g) : g_(g) {}

  bool prefix(std::string_view text) {
    const Decoded d = decode(text);
    if (!d.valid) return false;
    cps_ = d.cps;
    tail_ = d.tail;
    complete_ = false;
    return run();
  }
  bool complete(std::string_view text) {
    const Decoded d = decode(text);
    if (!d.valid || !d.tail.empty()) return false;
    cps_ = d.cps;
    tail_.clear();
    complete_ = true;
    return run();
  }

 private:
  bool run() {
    budget_ = 2'000'000;
    std::vector<uint32_t> start;
    for (uint32_t alt : g_.rules[g_.root]) {
      std::vector<uint32_t> stack{alt};
      if (search(stack, 0)) return true;
    }
    return false;
  }
  bool tail_fits(const CharSet& set) const {
    Utf8Partial p;
    for (char c : tail_) p.step(uint8_t(c));
    return set.intersects(p.lo(), p.hi());
  }
  // stack: positions (back = next); i: input consumed.
  bool search(std::vector<uint32_t> stack, size_t i) {
    if (--budget_ < 0) return false;
    if (i == cps_.size() && !complete_ && tail_.empty()) return true;  // any continuation will do... if one exists
    if (stack.empty()) return i == cps_.size() && (complete_ || tail_.empty()) ;
    if (stack.size() > 64) return false;
    const uint32_t q = stack.back();
    const Symbol& s = g_.symbols[q];
    stack.pop_back();
    switch (s.kind) {
      case Symbol::Kind::End:
        return search(stack, i);
      case Symbol::Kind::Rule: {
        stack.push_back(q + 1);
        for (uint32_t alt : g_.rules[s.index]) {
          auto next = stack;
          next.push_back(alt);
          if (search(next, i)) return true;
        }
        return false;
      }
      case Symbol::Kind::Chars: {
        const CharSet& set = g_.sets[s.index];
        if (i == cps_.size()) return !tail_.empty() && tail_fits(set);
        if (!set.contains(cps_[i])) return false;
        stack.push_back(q + 1);
        return search(stack, i + 1);
      }
      case Symbol::Kind::Star: {
        const CharSet& set = g_.sets[s.index];
        auto exit = stack;
        exit.push_back(q + 1);
        if (search(exit, i)) return true;
        if (i == cps_.size()) return !tail_.empty() && tail_fits(set);
        if (!set.contains(cps_[i])) return false;
        stack.push_back(q);
        return search(stack, i + 1);
      }
    }
    return false;
  }
  const Grammar& g_;
  std::vector<uint32_t> cps_;
  std::string tail_;
  bool complete_ = false;
  long budget_ = 0;
};

// A small vocabulary with the shapes that matter: single bytes, multi-character pieces, quotes
// inside pieces, UTF-8 split across tokens, invalid bytes, and an empty (control) token.
std::vector<std::string> small_vocab() {
  std::vector<std::string> v = {"", "{", "}", "[", "]", ",", ":", " ", "\n", "\"", "\\", "a", "b", "ab", "ba",
                                "\"a", "a\"", "\":", "\",", "\"}", "{\"", "1", "2", "0", "12", "-", ".", "e",
                                "true", "false", "null", "tr", "ue", "nu", "\xC3", "\xA9", "\xC3\xA9", "\xE2\x82",
                                "\xAC", "\xFF", "\x80", "x", "\t", "  ", ": ", ", ", "\"\"", "n", "u", "l", "f", "s",
                                "\\n", "\\\"", "5", "-1", "ab\"", "\"b\":", "aa", "bb", "t", "r"};
  return v;
}

std::shared_ptr<const CompiledGrammar> compile_text(const std::string& gbnf, const std::vector<std::string>& vocab) {
  auto g = parse_gbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.error();
  auto idx = std::make_shared<TokenIndex>(vocab);
  return compile(std::move(*g), idx);
}

// Random walks: at each step the mask must equal the reference's verdict for every token, and
// can_end must equal "the text is a complete document".
void check_against_reference(const std::string& gbnf, int walks, int steps, uint64_t seed) {
  const auto vocab = small_vocab();
  auto cg = compile_text(gbnf, vocab);
  Reference ref(cg->grammar);
  std::mt19937_64 rng(seed);
  for (int w = 0; w < walks; ++w) {
    Matcher m(cg);
    std::string text;
    for (int s = 0; s < steps; ++s) {
      auto mask = m.mask();
      std::vector<int32_t> allowed;
      for (size_t t = 0; t < vocab.size(); ++t) {
        const bool bit = (mask[t / 64] >> (t % 64)) & 1;
        const bool want = !vocab[t].empty() && ref.prefix(text + vocab[t]);
        ASSERT_EQ(bit, want) << "grammar:\n" << gbnf << "text '" << text << "' token '" << vocab[t] << "'";
        ASSERT_EQ(m.allowed(int32_t(t)), want);
        if (bit) allowed.push_back(int32_t(t));
      }
      ASSERT_EQ(m.can_end(), ref.complete(text)) << "text '" << text << "'";
      if (allowed.empty()) break;
      const int32_t pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept(pick));
      text += vocab[size_t(pick)];
    }
  }
}

}  // namespace

TEST(Gbnf, ParsesAndRejectsWithPositions) {
  EXPECT_TRUE(parse_gbnf("root ::= \"a\" | [b-c]+ x\nx ::= \"\\x41\" \"\\u00e9\"?  # comment\n").ok());
  auto undefined = parse_gbnf("root ::= foo\n");
  ASSERT_FALSE(undefined.ok());
  EXPECT_NE(undefined.error().find("'foo'"), std::string::npos);
  auto left = parse_gbnf("root ::= root \"a\" | \"b\"\n");
  ASSERT_FALSE(left.ok());
  EXPECT_NE(left.error().find("left-recursive"), std::string::npos);
  auto hidden_left = parse_gbnf("root ::= x root \"a\" | \"b\"\nx ::= \"\" | \"c\"\n");
  EXPECT_FALSE(hidden_left.ok());
  auto bad = parse_gbnf("root ::= \"a\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("line 1"), std::string::npos);
  EXPECT_FALSE(parse_gbnf("root ::= [a-\n").ok());
  EXPECT_FALSE(parse_gbnf("root ::= \"a\"{3,1}\n").ok());
  EXPECT_FALSE(parse_gbnf("root ::= \"a\"{100000}\n").ok());
  EXPECT_FALSE(parse_gbnf("x ::= \"a\"\n").ok());  // no root
  EXPECT_FALSE(parse_gbnf("root ::= \"a\" root2 ::= \"b\"\n").ok());
  EXPECT_FALSE(parse_gbnf("root ::= \"a\"\nroot ::= \"b\"\n").ok());
  // A rule named like a helper (group-N) is its own rule, not the group's.
  EXPECT_TRUE(parse_gbnf("root ::= ( \"a\" ) group-1\ngroup-1 ::= \"b\"\n").ok());
  std::string deep = "root ::= ";
  for (int i = 0; i < 100; ++i) deep += "(";
  EXPECT_FALSE(parse_gbnf(deep).ok());
}

TEST(Matcher, MaskEqualsBruteForceOnSmallGrammars) {
  check_against_reference("root ::= \"ab\" | \"a\" [b-z]* \"\\\"\"\n", 30, 8, 1);
  check_against_reference("root ::= [a-b]+ \",\" [a-b]*\n", 30, 10, 2);
  check_against_reference("root ::= ( \"a\" | \"b\" \"a\" )* \"}\"\n", 30, 10, 3);
  check_against_reference("root ::= [^\"\\\\]* \"\\\"\" ( \":\" | \",\" )\n", 40, 10, 4);
  check_against_reference("root ::= \"\\u00e9\" [a]? | [\\u00e0-\\u00ff]+ \"x\"\n", 30, 6, 5);
  // Star followed by something that can begin with its characters: the generic (non-table) path.
  check_against_reference("root ::= [a-b]* \"ab\" [a-b]* \"\\\"\"\n", 40, 10, 6);
  check_against_reference("root ::= [^,]* \"ab\" [^,]* \",\"\n", 40, 10, 7);
  // Sets large enough for a star table, with and without partial characters and escapes.
  check_against_reference("root ::= \"{\" [^\"\\\\\\x00-\\x1F]* \"\\\"\" \"}\"\n", 40, 10, 11);
  check_against_reference("root ::= ( [^\\\\\"]* \"\\\\\" [n\"] )* \"\\\"\"\n", 40, 10, 12);
  check_against_reference("root ::= x{2,4} \"-\"\nx ::= \"a\" | \"tr\" \"ue\"\n", 30, 8, 8);
  // `+` over table-sized sets (the star's tables, keeping tokens that begin with the set).
  check_against_reference("root ::= [^\"\\\\\\x00-\\x1F]+ \"\\\"\" ( \",\" | \"}\" )\n", 40, 10, 13);
  check_against_reference("root ::= [a-zA-Z0-9]+ ( \"-\"+ [a-zA-Z0-9]+ )* \".\" [a-zA-Z0-9]+ \"\\\"\"\n", 40, 10, 14);
}

TEST(Matcher, JsonSchemaGrammarAgreesWithReference) {
  const json schema = json::parse(R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"boolean"},
    "n":{"type":"array","items":{"type":"integer"},"maxItems":2}},"required":["a"]})");
  auto text = json_schema_to_gbnf(schema);
  ASSERT_TRUE(text.ok()) << text.error();
  check_against_reference(*text, 40, 14, 9);
  check_against_reference(json_object_gbnf(), 40, 12, 10);
  const json formats = json::parse(R"({"type":"object","properties":{"m":{"type":"string","format":"email"},
    "u":{"type":"string","format":"uri"},"n":{"type":"number","minimum":-1.5,"exclusiveMaximum":12},
    "k":{"type":"integer","multipleOf":3,"maximum":20}},"required":["m","u","n","k"]})");
  auto formats_text = json_schema_to_gbnf(formats);
  ASSERT_TRUE(formats_text.ok()) << formats_text.error();
  check_against_reference(*formats_text, 60, 24, 15);
}

TEST(Matcher, TracksStateAndEnd) {
  auto cg = compile_text("root ::= \"ab\" \",\"?\n", small_vocab());
  Matcher m(cg);
  EXPECT_FALSE(m.can_end());
  EXPECT_FALSE(m.accept(1));  // "{" is not allowed; state unchanged
  EXPECT_TRUE(m.accept(13));  // "ab"
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.done());
  EXPECT_TRUE(m.accept(5));  // ","
  EXPECT_TRUE(m.done());
  for (uint64_t w : m.mask()) EXPECT_EQ(w, 0u);
  EXPECT_FALSE(m.accept(0));  // an empty (control) token is never allowed
}

TEST(Matcher, RepetitionKeepsTheStateTableSmall) {
  // A long array of the same shape revisits the same states: no growth per element.
  auto cg = compile_text(json_object_gbnf(), small_vocab());
  Matcher m(cg);
  ASSERT_TRUE(m.accept_bytes("{\"a\": ["));
  ASSERT_TRUE(m.accept_bytes("1, 2"));
  const size_t before = m.num_states();
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(m.accept_bytes(", 12"));
  EXPECT_LE(m.num_states(), before + 8);
  ASSERT_TRUE(m.accept_bytes("]}"));
  EXPECT_TRUE(m.can_end());
}

TEST(Matcher, DeepNestingIsBoundedNotFatal) {
  auto cg = compile_text(json_object_gbnf(), small_vocab());
  Matcher m(cg);
  ASSERT_TRUE(m.accept_bytes("{\"a\":"));
  int accepted = 0;
  for (int i = 0; i < 5000; ++i) accepted += m.accept_bytes("[");
  EXPECT_LT(accepted, 5000);  // cut at the depth limit, never a crash or an endless expansion
  EXPECT_GT(accepted, 100);
}

TEST(JsonSchema, CompilesTheCommonKeywordsAndNamesTheRest) {
  const char* ok[] = {
      R"({"type":"string","enum":["a","b"]})",
      R"({"const":{"x":[1,2]}})",
      R"({"anyOf":[{"type":"string"},{"type":"null"}],"title":"t","default":null})",
      R"({"type":["integer","null"]})",
      R"({"type":"array","prefixItems":[{"type":"string"},{"type":"number"}]})",
      R"({"type":"array","items":{"type":"string","format":"date"},"minItems":1,"maxItems":3})",
      R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})",
      R"({"type":"string","minLength":2,"maxLength":5})",
      R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},"$ref":"#/$defs/node"})",
      R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}}},{"properties":{"b":{"type":"string"}},"required":["b"]}]})",
      R"({"type":"object","additionalProperties":{"type":"integer"}})",
      R"({"type":"integer","minimum":0})",
      R"({"type":"integer","minimum":-3,"exclusiveMaximum":7.5,"multipleOf":3})",
      R"({"type":"number","exclusiveMinimum":0,"maximum":0.75})",
      R"({"type":"string","format":"email"})",
      R"({"type":"string","format":"uri"})",
      R"({"type":"string","format":"ipv4"})",
      R"({"type":"object","properties":{"x":{"type":"string"},"y":{"type":"string"}}})",
      R"(true)",
      R"({"oneOf":[{"type":"string"},{"type":"integer"}]})",
      R"({"$defs":{"cat":{"type":"object","properties":{"kind":{"const":"cat"},"lives":{"type":"integer"}},"required":["kind"]},
          "dog":{"type":"object","properties":{"kind":{"const":"dog"}},"required":["kind"]}},
          "oneOf":[{"$ref":"#/$defs/cat"},{"$ref":"#/$defs/dog"}]})",
      R"({"type":"string","enum":["a",1,"b"]})",
      R"({"$ref":"#/$defs/x","description":"annotations beside a $ref are fine","$defs":{"x":{"type":"null"}}})",
  };
  for (const char* s : ok) {
    auto g = compile_json_schema(json::parse(s));
    EXPECT_TRUE(g.ok()) << s << ": " << g.error();
  }
  const std::pair<const char*, const char*> bad[] = {
      {R"({"type":"integer","maximum":3,"minimum":4})", "no integer satisfies"},
      {R"({"type":"number","minimum":0.0000001})", "more than 6 decimals"},
      {R"({"type":"integer","multipleOf":1000})", "'multipleOf' 1000"},
      {R"({"type":"integer","multipleOf":0})", "greater than 0"},
      {R"({"type":"number","exclusiveMinimum":true})", "draft 4"},
      {R"({"type":"string","format":"hostname"})", "'hostname'"},
      {R"({"type":"array","uniqueItems":true})", "'uniqueItems'"},
      {R"({"type":"array","items":{"type":"string"},"uniqueItems":true})", "'uniqueItems'"},
      {R"({"type":"array","items":{"enum":[1,2,3,4,5,6,7,8,9]},"uniqueItems":true})", "'uniqueItems'"},
      {R"({"type":"array","items":{"enum":[1,2]},"uniqueItems":true,"minItems":3})", "distinct values"},
      {R"({"$ref":"#/nowhere"})", "#/nowhere"},
      {R"j({"type":"string","pattern":"(?=a)"})j", "lookaround"},
      {R"({"type":"string","pattern":"\\bword"})", "\\b"},
      {R"({"type":"frog"})", "'frog'"},
      {R"(false)", "false"},
      {R"({"not":{}})", "'not'"},
      {R"({"oneOf":[{"type":"integer"},{"type":"number"}]})", "overlap"},
      {R"({"oneOf":[true,true]})", "overlap"},
      {R"({"anyOf":[{"type":"string"}],"minLength":2})", "'minLength'"},
      {R"({"enum":["a"],"minLength":2})", "'minLength'"},
      {R"({"minimum":"2"})", "'minimum' must be a number"},
      {R"({"allOf":[{"properties":{"a":{"type":"string"}}},{"properties":{"a":{"type":"integer"}}}]})", "twice"},
      {R"({"allOf":[{"type":"object"},{"maxProperties":1}]})", "'maxProperties'"},
      {R"({"$ref":"#/$defs/x","minLength":1,"$defs":{"x":{"type":"string"}}})", "'$ref' together with 'minLength'"},
  };
  for (const auto& [s, name] : bad) {
    auto g = compile_json_schema(json::parse(s));
    ASSERT_FALSE(g.ok()) << s;
    EXPECT_NE(g.error().find(name), std::string::npos) << s << " -> " << g.error();
  }
}

TEST(JsonSchema, PropertiesComeInSchemaOrder) {
  auto cg = compile_text(*json_schema_to_gbnf(json::parse(
                             R"({"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"integer"}},"required":["z","a"]})")),
                         small_vocab());
  Matcher z(cg);
  EXPECT_TRUE(z.accept_bytes("{\"z\": 1, \"a\": 2}"));
  EXPECT_TRUE(z.can_end());
  Matcher a(cg);
  EXPECT_FALSE(a.accept_bytes("{\"a\": 2"));
}

TEST(JsonSchema, OptionalPropertiesInOrderEachAtMostOnce) {
  const std::string gbnf = *json_schema_to_gbnf(json::parse(
      R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}}})"));
  auto cg = compile_text(gbnf, small_vocab());
  for (const char* yes : {"{}", "{\"b\": 1}", "{\"a\": 1, \"c\": 2}", "{\"a\": 1, \"b\": 2, \"c\": 3}", "{\"c\": 3}"}) {
    Matcher m(cg);
    EXPECT_TRUE(m.accept_bytes(yes) && m.can_end()) << yes;
  }
  for (const char* no : {"{\"c\": 1, \"a\": 2}", "{\"a\": 1, \"a\": 2}", "{, \"a\": 1}", "{\"a\": 1,}", "{\"d\": 1}"}) {
    Matcher m(cg);
    EXPECT_FALSE(m.accept_bytes(no) && m.can_end()) << no;
  }
  check_against_reference(gbnf, 20, 24, 7);
}

// uniqueItems over an enum, against brute force: every array of up to 5 items over the enum's
// values and a foreign one is admitted exactly when its items are in the enum, distinct, and
// their count is within minItems..maxItems.
TEST(JsonSchema, UniqueItemsOverAnEnumAgainstBruteForce) {
  const std::vector<std::string> values = {"\"red\"", "\"green\"", "7", "null", "\"blue\""};  // the last is foreign
  for (auto [min, max] : {std::pair{0, -1}, {1, 3}, {2, 2}, {0, 0}}) {
    json schema = json::parse(R"({"type":"array","items":{"enum":["red","green",7,null]},"uniqueItems":true})");
    if (min > 0) schema["minItems"] = min;
    if (max >= 0) schema["maxItems"] = max;
    const std::string gbnf = *json_schema_to_gbnf(schema);
    auto cg = compile_text(gbnf, small_vocab());
    int admitted = 0;
    std::vector<int> pick;
    // Every sequence of length 0..5 over the 5 values (5^0 + ... + 5^5 = 3906 arrays).
    std::function<void()> walk = [&] {
      std::string text = "[";
      bool valid = true;
      for (size_t i = 0; i < pick.size(); ++i) {
        text += (i ? ", " : "") + values[size_t(pick[i])];
        valid &= pick[i] != 4 && std::count(pick.begin(), pick.end(), pick[i]) == 1;
      }
      text += "]";
      const int n = int(pick.size());
      valid &= n >= min && (max < 0 || n <= max);
      Matcher m(cg);
      const bool got = m.accept_bytes(text) && m.can_end();
      EXPECT_EQ(got, valid) << schema.dump() << " " << text;
      admitted += got;
      if (pick.size() == 5) return;
      for (int v = 0; v < 5; ++v) {
        pick.push_back(v);
        walk();
        pick.pop_back();
      }
    };
    walk();
    EXPECT_GT(admitted, 0);
  }
  check_against_reference(*json_schema_to_gbnf(json::parse(
                              R"({"type":"array","items":{"enum":["a","b",1]},"uniqueItems":true,"minItems":1})")),
                          20, 24, 11);
}

// Hardening II: what a hostile schema costs is bounded while it compiles, and the refusal names
// the limit. N optional properties make a grammar linear in N (it was quadratic: 4,000 took 1.5 GB).
// Wall-clock bounds of the budget checks, stretched under the sanitizers (several times slower).
#if defined(__SANITIZE_ADDRESS__)
constexpr int kSlowdown = 6;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr int kSlowdown = 6;
#else
constexpr int kSlowdown = 1;
#endif
#else
constexpr int kSlowdown = 1;
#endif

TEST(JsonSchema, CompilationIsBudgetedAndLinear) {
  auto optional_props = [](int n) {
    json props = json::object();
    for (int i = 0; i < n; ++i) props["property_" + std::to_string(i)] = {{"type", "string"}};
    return json{{"type", "object"}, {"properties", props}};
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto small = json_schema_to_gbnf(optional_props(256));
  auto big = json_schema_to_gbnf(optional_props(int(kSchemaMaxOptionalProperties)));
  ASSERT_TRUE(small.ok()) << small.error();
  ASSERT_TRUE(big.ok()) << big.error();
  EXPECT_LT(big->size(), 5 * small->size());  // linear: 4x the properties, about 4x the text
  auto g = parse_gbnf(*big);
  ASSERT_TRUE(g.ok()) << g.error();
  auto cg = compile(std::move(*g), std::make_shared<TokenIndex>(small_vocab()));
  Matcher m(cg);  // the last property may follow the first: no parse was cut
  EXPECT_TRUE(m.accept_bytes("{\"property_0\": \"a\", \"property_1023\": \"b\"}") && m.can_end());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500 * kSlowdown));

  auto refused = [](const json& schema, const std::string& limit) {
    const auto start = std::chrono::steady_clock::now();
    auto r = compile_json_schema(schema);
    const auto took = std::chrono::steady_clock::now() - start;
    ASSERT_FALSE(r.ok()) << limit;
    EXPECT_EQ(r.error_code(), kvasir::ErrorCode::invalid_argument);
    // Under the sanitizers on a busy machine the 250 ms budget can end the compilation before
    // the rule limit does: either refusal bounds the work.
    const bool by_budget = kSlowdown > 1 && r.error().find("takes more than") != std::string::npos;
    EXPECT_TRUE(r.error().find(limit) != std::string::npos || by_budget) << r.error();
    EXPECT_LT(took, std::chrono::milliseconds(500 * kSlowdown)) << limit;
  };
  refused(optional_props(4000), "at most " + std::to_string(kSchemaMaxOptionalProperties));
  // oneOf is checked pairwise: its branches are capped.
  json one_of = json::array();
  for (int i = 0; i < 10000; ++i) one_of.push_back({{"const", i}});
  refused({{"oneOf", one_of}}, "at most " + std::to_string(kSchemaMaxOneOf));
  json any_of = json::array();
  for (int i = 0; i < 5000; ++i) any_of.push_back({{"const", i}});
  refused({{"anyOf", any_of}}, "at most " + std::to_string(kSchemaMaxBranches));
  // A chain of $ref aliases: each one is a level.
  json defs = json::object();
  for (int i = 0; i < 2000; ++i) defs["a" + std::to_string(i)] = {{"$ref", "#/$defs/a" + std::to_string(i + 1)}};
  defs["a2000"] = {{"type", "string"}};
  refused({{"$defs", defs}, {"$ref", "#/$defs/a0"}}, "deeper than 64");
  // A $ref graph whose unfolding doubles per level (d_i: anyOf [d_{i+1}, d_{i+1}]) under a oneOf,
  // whose overlap check walks it: the step budget ends it.
  json dag = json::object();
  for (int i = 0; i < 60; ++i) {
    const std::string next = "#/$defs/d" + std::to_string(i + 1);
    dag["d" + std::to_string(i)] = {{"anyOf", json::array({{{"$ref", next}}, {{"$ref", next}, {"description", "x"}}})}};
  }
  dag["d60"] = {{"type", "string"}};
  refused({{"$defs", dag}, {"oneOf", json::array({{{"$ref", "#/$defs/d0"}}, {{"type", "integer"}}})}},
          std::to_string(kSchemaMaxSteps) + " steps");
  // Many distinct rules: objects of required properties each with its own pattern.
  json wide = json::object();
  for (int i = 0; i < 8000; ++i)
    wide["p" + std::to_string(i)] = {{"type", "string"}, {"pattern", "^x{" + std::to_string(i % 97 + 1) + "}" + std::to_string(i) + "$"}};
  json required = json::array();
  for (int i = 0; i < 8000; ++i) required.push_back("p" + std::to_string(i));
  auto r = json_schema_to_gbnf(json{{"type", "object"}, {"properties", wide}, {"required", required}});
  ASSERT_FALSE(r.ok());
  // Whichever budget runs out first refuses it: rules or bytes, or, on a slow (sanitizer) build,
  // the time budget.
  EXPECT_TRUE(r.error().find(std::to_string(kSchemaMaxRules) + " rules") != std::string::npos ||
              r.error().find(std::to_string(kSchemaMaxGrammarBytes) + " bytes") != std::string::npos ||
              r.error().find("takes more than") != std::string::npos)
      << r.error();
}

TEST(Regex, PatternsBecomeJsonStringBodies) {
  auto body = regex_to_gbnf("^a\"b[0-9]+(x|yz)?$");
  ASSERT_TRUE(body.ok()) << body.error();
  auto g = parse_gbnf("root ::= " + *body + "\n");
  ASSERT_TRUE(g.ok()) << g.error();
  auto cg = compile(std::move(*g), std::make_shared<TokenIndex>(small_vocab()));
  for (const char* yes : {"a\\\"b12", "a\\\"b1yz", "a\\\"b5x"}) {
    Matcher m(cg);
    EXPECT_TRUE(m.accept_bytes(yes) && m.can_end()) << yes;
  }
  for (const char* no : {"a\"b1", "a\\\"b", "a\\\"b1y"}) {
    Matcher m(cg);
    EXPECT_FALSE(m.accept_bytes(no) && m.can_end()) << no;
  }
}


// format "date" admits only dates that exist in every year: year 0001-9999, each month's own
// days, February 01-28 (whether the 29th exists depends on the year). A sampled "0000-05-05"
// once failed a validator.
TEST(JsonSchema, DateFormatAdmitsOnlyRealDates) {
  auto text = json_schema_to_gbnf(json::parse(R"({"type":"string","format":"date"})"));
  ASSERT_TRUE(text.ok()) << text.error();
  auto cg = compile_text(*text, small_vocab());
  auto admits = [&](const std::string& date) {
    Matcher m(cg);
    return m.accept_bytes("\"" + date + "\"") && m.can_end();
  };
  for (const char* ok : {"2024-02-28", "0001-01-31", "1999-04-30", "9999-12-31", "0010-11-30", "0100-07-31"})
    EXPECT_TRUE(admits(ok)) << ok;
  for (const char* no : {"0000-05-05", "2023-02-29", "2023-02-30", "2023-04-31", "2023-13-01", "2023-00-10", "2023-01-00"})
    EXPECT_FALSE(admits(no)) << no;
}

