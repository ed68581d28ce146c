// Structured output through the engine on real models: sampled output at temperature 1 is always
// a complete document of the grammar (checked by parsing it and by an independent check of the
// schema's shape), masks hold for drafted tokens too (greedy output is the same with and without
// speculation), and generation ends the moment the document is complete.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "backends/engine_factory.h"
#include "engine/engine.h"
#include "engine/structured.h"
#include "model/model.h"

using namespace kvasir;
using namespace kvasir::engine;
using json = nlohmann::ordered_json;

namespace {

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
};

Loaded load(const std::string& name) {
  auto m = Model::load(std::string(KVASIR_SHARED_DIR) + "/models/" + name + ".gguf");
  EXPECT_TRUE(m.ok()) << m.error();
  auto t = Tokenizer::from_gguf((*m)->gguf());
  EXPECT_TRUE(t.ok()) << t.error();
  return {std::move(*m), std::make_unique<Tokenizer>(std::move(*t))};
}

bool have_shared() { return std::ifstream(std::string(KVASIR_SHARED_DIR) + "/models/stories260K.gguf").good(); }

struct Out {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::None;
};

std::vector<Out> run_all(EngineCore& c, const std::vector<GenerationParams>& reqs) {
  std::map<RequestId, Out> out;
  std::vector<RequestId> ids;
  for (const auto& p : reqs) {
    auto id = c.add_request(p);
    EXPECT_TRUE(id.ok()) << id.error();
    ids.push_back(*id);
  }
  std::vector<Delta> deltas;
  for (int guard = 0; c.has_unfinished() && guard < 100000; ++guard) {
    deltas.clear();
    EXPECT_TRUE(c.step(deltas).ok());
    for (auto& d : deltas) {
      auto& r = out[d.id];
      r.tokens.insert(r.tokens.end(), d.tokens.begin(), d.tokens.end());
      r.text += d.text;
      if (d.finish != FinishReason::None) r.finish = d.finish;
    }
  }
  std::vector<Out> v;
  for (RequestId id : ids) v.push_back(out[id]);
  return v;
}

// An engine on the CPU runner with a KV pool of kv_blocks blocks (0: the default size).
std::unique_ptr<EngineCore> core(const Loaded& l, EngineOptions o, int64_t kv_blocks = 0) {
  o.num_threads = 2;
  auto c = backends::create_engine_core(*l.model, *l.tok, {.engine = o, .kv = {.n_blocks = kv_blocks}});
  EXPECT_TRUE(c.ok()) << c.error();
  return std::move(*c);
}

const char* kPerson = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":12},
  "age":{"type":"integer","minimum":0},
  "kind":{"enum":["cat","dog",null]},
  "tags":{"type":"array","items":{"type":"boolean"},"maxItems":3}},
  "required":["name","age","kind"]})";

// The shape kPerson demands, checked on the parsed value (independently of the grammar).
void expect_person(const json& v, const std::string& text) {
  ASSERT_TRUE(v.is_object()) << text;
  ASSERT_TRUE(v.contains("name") && v["name"].is_string()) << text;
  EXPECT_LE(json(v["name"]).get<std::string>().size(), 12u * 4) << text;
  ASSERT_TRUE(v.contains("age") && v["age"].is_number_integer() && v["age"].get<int64_t>() >= 0) << text;
  ASSERT_TRUE(v.contains("kind")) << text;
  EXPECT_TRUE(v["kind"] == "cat" || v["kind"] == "dog" || v["kind"].is_null()) << text;
  for (const auto& [k, _] : v.items()) EXPECT_TRUE(k == "name" || k == "age" || k == "kind" || k == "tags") << text;
  if (v.contains("tags")) {
    ASSERT_TRUE(v["tags"].is_array()) << text;
    EXPECT_LE(v["tags"].size(), 3u);
    for (const auto& b : v["tags"]) EXPECT_TRUE(b.is_boolean()) << text;
  }
}

}  // namespace

class Structured : public ::testing::TestWithParam<std::string> {};

TEST_P(Structured, SampledOutputIsAlwaysAValidDocument) {
  if (!have_shared()) GTEST_SKIP() << "../shared is not available";
  Loaded l = load(GetParam());
  GrammarCache cache(grammar_token_index(*l.tok));
  auto person = cache.get({GrammarSpec::Kind::json_schema, kPerson});
  ASSERT_TRUE(person.ok()) << person.error();
  auto any = cache.get({GrammarSpec::Kind::json_object, ""});
  ASSERT_TRUE(any.ok()) << any.error();
  std::vector<GenerationParams> reqs;
  for (int i = 0; i < 24; ++i) {
    GenerationParams p;
    p.prompt = l.tok->encode("Once upon a time, a record: ");
    p.sampling = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.f, .seed = uint64_t(1000 + i)};
    p.stop.max_tokens = 256;
    p.grammar = i % 3 == 2 ? *any : *person;
    reqs.push_back(p);
  }
  auto c = core(l, {.max_batch_tokens = 128, .max_seqs = 8}, 512);
  const auto outs = run_all(*c, reqs);
  int complete = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    const Out& o = outs[i];
    if (o.finish == FinishReason::Length) continue;  // cut by max_tokens: not a document yet
    ASSERT_EQ(o.finish, FinishReason::Stop) << o.text;
    ++complete;
    const json v = json::parse(o.text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << "not JSON: " << o.text;
    if (i % 3 == 2) EXPECT_TRUE(v.is_object()) << o.text;
    else expect_person(v, o.text);
  }
  EXPECT_GE(complete, 12) << "too few documents finished to mean anything";
  EXPECT_EQ(c->stats().kv_blocks_used, 0);
}

TEST_P(Structured, SpeculationKeepsConstrainedGreedyOutput) {
  if (!have_shared()) GTEST_SKIP() << "../shared is not available";
  Loaded l = load(GetParam());
  GrammarCache cache(grammar_token_index(*l.tok));
  // Repetitive documents, where n-gram drafts are proposed and some of them break the grammar.
  auto g = cache.get({GrammarSpec::Kind::json_schema,
                      R"({"type":"array","items":{"type":"object","properties":{"a":{"type":"string","maxLength":6},
                         "b":{"type":"integer"}},"required":["a","b"]},"minItems":2,"maxItems":6})"});
  ASSERT_TRUE(g.ok()) << g.error();
  std::vector<GenerationParams> reqs;
  for (int i = 0; i < 6; ++i) {
    GenerationParams p;
    p.prompt = l.tok->encode(std::string("[{\"a\": \"xy\", \"b\": 1}, {\"a\": \"xy\", \"b\": 1}] again ") + char('a' + i));
    p.sampling = {.temperature = 0.f};
    p.stop.max_tokens = 96;
    p.grammar = *g;
    reqs.push_back(p);
  }
  auto plain = core(l, {.max_batch_tokens = 64, .max_seqs = 6}, 256);
  const auto ref = run_all(*plain, reqs);
  EngineOptions o{.max_batch_tokens = 32, .max_seqs = 6};
  o.spec = {.method = SpecMethod::ngram, .max_k = 4, .adaptive = false};
  auto spec = core(l, o, 256);
  const auto got = run_all(*spec, reqs);
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_EQ(got[i].tokens, ref[i].tokens) << ref[i].text << " | " << got[i].text;
    EXPECT_EQ(got[i].finish, ref[i].finish);
  }
  EXPECT_GT(spec->stats().spec_draft_tokens, 0);
}

INSTANTIATE_TEST_SUITE_P(Models, Structured,
                         ::testing::Values("stories260K", "fixture-llama-q4_k_m", "fixture-gemma3-q8_0",
                                           "fixture-qwen2-q8_0"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(Structured, EndsWhenTheDocumentIsCompleteAndRejectsBadGrammars) {
  if (!have_shared()) GTEST_SKIP() << "../shared is not available";
  Loaded l = load("stories260K");
  GrammarCache cache(grammar_token_index(*l.tok));
  auto g = cache.get({GrammarSpec::Kind::gbnf, "root ::= \"yes\" | \"no\"\n"});
  ASSERT_TRUE(g.ok()) << g.error();
  std::vector<GenerationParams> reqs;
  for (int i = 0; i < 4; ++i) {
    GenerationParams p;
    p.prompt = l.tok->encode("Answer:");
    p.sampling = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.f, .seed = uint64_t(i)};
    p.stop = {.max_tokens = 50, .min_tokens = 10, .ignore_eos = true};  // neither may keep it going
    p.grammar = *g;
    reqs.push_back(p);
  }
  auto c = core(l, {.max_batch_tokens = 64, .max_seqs = 4}, 64);
  for (const Out& o : run_all(*c, reqs)) {
    EXPECT_TRUE(o.text == "yes" || o.text == "no") << o.text;
    EXPECT_EQ(o.finish, FinishReason::Stop);
  }
  EXPECT_FALSE(cache.get({GrammarSpec::Kind::gbnf, "root ::= nothing\n"}).ok());
  auto bad = cache.get({GrammarSpec::Kind::json_schema, R"({"type":"string","format":"hostname"})"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error_code(), ErrorCode::invalid_argument);
  EXPECT_FALSE(cache.get({GrammarSpec::Kind::json_schema, "{not json"}).ok());
  // The same spec twice is one compiled grammar.
  EXPECT_EQ(cache.get({GrammarSpec::Kind::json_object, ""})->get(), cache.get({GrammarSpec::Kind::json_object, ""})->get());
}

// A lazy grammar (tool_choice "auto"): free until the trigger appears in the output, then the
// grammar (which begins with the trigger) holds the rest. The trigger is forced here by a bias.
TEST(Structured, LazyGrammarStartsAtItsTrigger) {
  if (!have_shared()) GTEST_SKIP() << "../shared is not available";
  Loaded l = load("stories260K");
  const int32_t q = l.tok->token_to_id("Q");
  ASSERT_GE(q, 0);
  GrammarCache cache(grammar_token_index(*l.tok));
  auto g = cache.get({GrammarSpec::Kind::gbnf, "root ::= \"Q\" [a-z]{2,4} \"!\"\n"});
  ASSERT_TRUE(g.ok()) << g.error();
  std::vector<GenerationParams> reqs;
  for (int i = 0; i < 6; ++i) {
    GenerationParams p;
    p.prompt = l.tok->encode("Once upon a time");
    p.sampling = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.f, .seed = uint64_t(i)};
    p.stop = {.max_tokens = 40};
    p.grammar = *g;
    p.grammar_trigger = "Q";
    if (i % 2 == 0) p.logit_bias = {{q, 100.f}};  // the trigger comes first
    reqs.push_back(p);
  }
  auto c = core(l, {.max_batch_tokens = 64, .max_seqs = 6}, 64);
  const auto outs = run_all(*c, reqs);
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string& t = outs[i].text;
    if (i % 2 == 1) {  // never triggered: free text
      EXPECT_EQ(t.find('Q'), std::string::npos) << t;
      continue;
    }
    ASSERT_GE(t.size(), 4u) << t;
    EXPECT_EQ(t[0], 'Q') << t;
    EXPECT_EQ(t.back(), '!') << t;
    for (size_t k = 1; k + 1 < t.size(); ++k) EXPECT_TRUE(t[k] >= 'a' && t[k] <= 'z') << t;
    EXPECT_EQ(outs[i].finish, FinishReason::Stop);
  }
}
