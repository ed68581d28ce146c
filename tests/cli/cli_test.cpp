// The kvasir binary driven as a user would: exact stdout, exit codes, and clear errors for
// corrupt model files (exit code 1, never a crash).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

namespace {

std::string shared_path(const std::string& rel) { return std::string(KVASIR_SHARED_DIR) + "/" + rel; }

struct Output {
  int code = -1;
  std::string out, err;
};

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs kvasir with args; captures stdout and stderr separately.
Output kvasir(const std::vector<std::string>& args) {
  // A file per call: ctest runs test processes in parallel.
  static int calls = 0;
  const std::string err_path =
      ::testing::TempDir() + "/kvasir_stderr_" + std::to_string(getpid()) + "_" + std::to_string(calls++) + ".txt";
  std::string cmd = std::string(KVASIR_BIN_DIR) + "/kvasir";
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " 2>" + err_path;
  Output o;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return o;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), n);
  const int status = pclose(p);
  o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream e(err_path);
  o.err.assign(std::istreambuf_iterator<char>(e), {});
  return o;
}

std::string write_temp(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

TEST(Cli, RunGreedyReproducesLlamaCpp) {
  std::ifstream in(shared_path("golden/models/stories260K.text.json"));
  const auto golden = nlohmann::json::parse(in);
  for (const auto& c : golden["cases"]) {
    if (c["greedy_text"].is_null()) continue;
    const auto n = c["greedy_ids"].size();
    const auto o = kvasir({"run", "-m", shared_path("models/stories260K.gguf"), "-p", c["prompt"], "-n",
                           std::to_string(n), "--temp", "0", "-t", "2"});
    ASSERT_EQ(o.code, 0) << o.err;
    EXPECT_EQ(o.out, c["greedy_text"].get<std::string>()) << c["prompt"];
    EXPECT_NE(o.err.find("tok/s"), std::string::npos);
  }
}

TEST(Cli, SameSeedSameText) {
  const std::vector<std::string> args = {"run", "-m", shared_path("models/stories260K.gguf"), "-p", "Once upon a time",
                                         "-n", "40", "--temp", "0.9", "--seed", "1234"};
  const auto a = kvasir(args), b = kvasir(args);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_FALSE(a.out.empty());
}

TEST(Cli, LogitsMatchesGoldenShape) {
  const auto o = kvasir({"logits", "-m", shared_path("models/stories260K.gguf"), "--ids", "1,403,407", "--top", "5",
                         "--greedy", "4"});
  ASSERT_EQ(o.code, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["prompt_ids"], nlohmann::json({1, 403, 407}));
  ASSERT_EQ(j["positions"].size(), 3u);
  EXPECT_EQ(j["positions"][0]["top"].size(), 5u);
  EXPECT_EQ(j["greedy_ids"].size(), 4u);
}

TEST(Cli, InspectPrintsMetadataAndTensors) {
  const auto o = kvasir({"inspect", shared_path("models/fixture-qwen2-q4_k.gguf")});
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("general.architecture"), std::string::npos);
  EXPECT_NE(o.out.find("blk.1.ffn_down.weight"), std::string::npos);
  EXPECT_NE(o.out.find("Q4_K"), std::string::npos);
}

TEST(Cli, CorruptFilesExitWithOneAndAMessage) {
  const std::string good = read_file(shared_path("models/stories260K-q8_0.gguf"));
  std::vector<std::pair<std::string, std::string>> cases = {
      {"empty.gguf", ""},
      {"text.gguf", "this is not a model"},
      {"truncated-header.gguf", good.substr(0, 100)},
      {"truncated-middle.gguf", good.substr(0, good.size() / 2)},
      // The last tensor ends before the alignment padding: cut well into its data.
      {"truncated-end.gguf", good.substr(0, good.size() - 100)},
  };
  std::mt19937 rng(5);
  for (int i = 0; i < 6; ++i) {  // bit flips in the header and metadata
    std::string b = good;
    for (int k = 0; k < 8; ++k) b[rng() % 4096] ^= char(1 << (rng() % 8));
    cases.push_back({"flipped" + std::to_string(i) + ".gguf", b});
  }
  for (const auto& [name, bytes] : cases) {
    const std::string path = write_temp(name, bytes);
    for (const std::string cmd : {"inspect", "run"}) {
      const auto o = cmd == "inspect" ? kvasir({"inspect", path}) : kvasir({"run", "-m", path, "-p", "hi", "-n", "4"});
      if (name.rfind("flipped", 0) == 0 && o.code == 0) continue;  // a flip may land somewhere harmless
      EXPECT_EQ(o.code, 1) << name << " " << cmd << ": " << o.err;
      EXPECT_NE(o.err.find("error:"), std::string::npos) << name;
    }
  }
}

TEST(Cli, BadArgumentsFail) {
  EXPECT_NE(kvasir({"run", "-m", shared_path("models/stories260K.gguf")}).code, 0);  // no prompt
  EXPECT_EQ(kvasir({"logits", "-m", shared_path("models/stories260K.gguf"), "--ids", "1,x"}).code, 1);
  EXPECT_EQ(kvasir({"logits", "-m", shared_path("models/stories260K.gguf"), "--ids", "1,99999"}).code, 1);
  EXPECT_EQ(kvasir({"run", "-m", "/nonexistent.gguf", "-p", "x"}).code, 1);
}

TEST(Cli, PromptLongerThanContextIsAnError) {
  std::string prompt;
  for (int i = 0; i < 200; ++i) prompt += "Once upon a time ";
  const auto o = kvasir({"run", "-m", shared_path("models/stories260K.gguf"), "-p", prompt, "-n", "4", "--ctx", "64"});
  EXPECT_EQ(o.code, 1);
  EXPECT_NE(o.err.find("does not fit the context"), std::string::npos) << o.err;
}

TEST(Cli, PerplexityReportsAndRefusesBadInput) {
  const std::string text = shared_path("golden/perplexity/stories-sampled.txt");
  if (!std::ifstream(text)) GTEST_SKIP() << "../shared is not available";
  const auto o = kvasir({"perplexity", "-m", shared_path("models/stories260K.gguf"), "-f", text, "-c", "128", "--json"});
  ASSERT_EQ(o.code, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["chunks"], 106);
  EXPECT_NEAR(j["ppl"].get<double>(), 2.9267, 0.03);
  const auto kl = kvasir({"perplexity", "-m", shared_path("models/stories260K-q8_0.gguf"), "--kl-base",
                          shared_path("models/stories260K.gguf"), "-f", text, "-c", "128"});
  ASSERT_EQ(kl.code, 0) << kl.err;
  EXPECT_NE(kl.out.find("Mean    KLD:"), std::string::npos) << kl.out;
  EXPECT_NE(kl.out.find("Same top p:"), std::string::npos) << kl.out;
  const auto short_text = kvasir({"perplexity", "-m", shared_path("models/stories260K.gguf"), "-f",
                                  write_temp("short.txt", "Once upon a time."), "-c", "128"});
  EXPECT_EQ(short_text.code, 1);
  EXPECT_NE(short_text.err.find("fewer than one chunk"), std::string::npos) << short_text.err;
  const std::string gemma = std::string(KVASIR_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf";
  if (std::ifstream(gemma)) {  // another vocabulary (the shared fixtures all have stories260K's)
    const auto other_vocab = kvasir({"perplexity", "-m", shared_path("models/stories260K.gguf"), "--kl-base", gemma,
                                     "-f", text});
    EXPECT_EQ(other_vocab.code, 1);
    EXPECT_NE(other_vocab.err.find("vocabulary"), std::string::npos) << other_vocab.err;
  }
  EXPECT_EQ(kvasir({"perplexity", "-m", shared_path("models/stories260K.gguf"), "-f", "/nonexistent.txt"}).code, 1);
}

TEST(Cli, QuantizeWritesAFileOrExplainsWhyNot) {
  const std::string f32 = shared_path("models/fixture-llama-f32.gguf");
  if (!std::ifstream(f32)) GTEST_SKIP() << "../shared is not available";
  const std::string out = ::testing::TempDir() + "/kvasir_cli_q8.gguf";
  const auto ok = kvasir({"quantize", f32, out, "q8_0", "--pure", "-t", "2"});
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(read_file(out), read_file(shared_path("models/fixture-llama-q8_0.gguf")));
  const auto bad_type = kvasir({"quantize", f32, out, "q7_k"});
  EXPECT_EQ(bad_type.code, 1);
  EXPECT_NE(bad_type.err.find("q4_k_m"), std::string::npos) << bad_type.err;  // the known types are listed
  const auto bad_regex = kvasir({"quantize", f32, out, "q4_0", "--tensor-type", "attn_(=q8_0"});
  EXPECT_EQ(bad_regex.code, 1);
  EXPECT_NE(bad_regex.err.find("regular expression"), std::string::npos) << bad_regex.err;
  const auto requant = kvasir({"quantize", shared_path("models/fixture-llama-q8_0.gguf"), out, "q4_0"});
  EXPECT_EQ(requant.code, 1);
  EXPECT_NE(requant.err.find("--allow-requantize"), std::string::npos) << requant.err;
  EXPECT_FALSE(std::ifstream(out + ".tmp"));  // a refused run leaves no partial file
}

// The quality gate measures the result against its source before writing it: a mild type passes
// a tight limit, a harsh one is refused (nothing written, the report printed).
TEST(Cli, QuantizeQualityGate) {
  const std::string f32 = shared_path("models/stories260K.gguf");
  const std::string text = shared_path("golden/perplexity/stories-sampled.txt");
  if (!std::ifstream(f32) || !std::ifstream(text)) GTEST_SKIP() << "../shared is not available";
  const std::string out = ::testing::TempDir() + "/kvasir_cli_gate.gguf";
  std::remove(out.c_str());
  // stories260K: Q8_0 measures ~0.0006 mean KLD, Q2_K far more than 0.01.
  const auto pass = kvasir({"quantize", f32, out, "q8_0", "--max-kld", "0.01", "--eval-text", text, "--eval-ctx", "128"});
  ASSERT_EQ(pass.code, 0) << pass.err;
  EXPECT_NE(pass.err.find("pass"), std::string::npos) << pass.err;
  EXPECT_TRUE(std::ifstream(out));
  std::remove(out.c_str());
  const auto refused = kvasir({"quantize", f32, out, "q2_k", "--max-kld", "0.01", "--eval-text", text, "--eval-ctx", "128"});
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.err.find("REFUSED"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("mean KLD"), std::string::npos) << refused.err;
  EXPECT_FALSE(std::ifstream(out));
  EXPECT_FALSE(std::ifstream(out + ".tmp"));
  EXPECT_NE(kvasir({"quantize", f32, out, "q8_0", "--max-kld", "0.01"}).code, 0);  // the gate needs a text
}

// Calibrated methods from the command line: a GPTQ and an AWQ+GPTQ file that load and generate,
// with the method recorded; the quality gate applies to them; bad calibration input is refused.
TEST(Cli, QuantizeWithCalibration) {
  const std::string f32 = shared_path("models/stories260K.gguf");
  const std::string text = shared_path("golden/perplexity/stories-sampled.txt");
  if (!std::ifstream(f32) || !std::ifstream(text)) GTEST_SKIP() << "../shared is not available";
  const std::string out = ::testing::TempDir() + "/kvasir_cli_gptq.gguf";
  for (const std::string method : {"gptq", "awq-gptq"}) {
    const auto q = kvasir({"quantize", f32, out, "q4_0", "--method", method, "--calib-text", text, "--calib-ctx", "128",
                           "--calib-chunks", "8", "-t", "2", "--max-kld", "0.5", "--eval-text", text, "--eval-ctx", "128"});
    ASSERT_EQ(q.code, 0) << q.err;
    EXPECT_NE(q.err.find(method + ": "), std::string::npos) << q.err;
    EXPECT_NE(q.err.find("pass"), std::string::npos) << q.err;
    const auto info = kvasir({"inspect", out});
    EXPECT_NE(info.out.find(method), std::string::npos);  // quantize.method
    const auto run = kvasir({"run", "-m", out, "-p", "Once upon a time", "-n", "8", "--temp", "0"});
    EXPECT_EQ(run.code, 0) << run.err;
    EXPECT_FALSE(run.out.empty());
  }
  const auto no_text = kvasir({"quantize", f32, out, "q4_0", "--method", "gptq"});
  EXPECT_EQ(no_text.code, 1);
  EXPECT_NE(no_text.err.find("--calib-text"), std::string::npos) << no_text.err;
  const auto stray = kvasir({"quantize", f32, out, "q4_0", "--calib-text", text});
  EXPECT_EQ(stray.code, 1);
  const std::string tiny = ::testing::TempDir() + "/kvasir_cli_tiny.txt";
  std::ofstream(tiny) << "Once upon a time.";
  const auto short_text = kvasir({"quantize", f32, out, "q4_0", "--method", "awq", "--calib-text", tiny});
  EXPECT_EQ(short_text.code, 1);
  EXPECT_NE(short_text.err.find("at least one chunk"), std::string::npos) << short_text.err;
  const auto missing = kvasir({"quantize", f32, out, "q4_0", "--method", "gptq", "--calib-text", tiny + ".absent"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("cannot read"), std::string::npos) << missing.err;
  const auto bad_method = kvasir({"quantize", f32, out, "q4_0", "--method", "spqr", "--calib-text", text});
  EXPECT_NE(bad_method.code, 0);
  std::remove(out.c_str());
  std::remove(tiny.c_str());
}

// --quantize at load gives exactly what loading a `kvasir quantize` file gives.
TEST(Cli, RuntimeQuantizeEqualsTheQuantizedFile) {
  const std::string f32 = shared_path("models/stories260K.gguf");
  if (!std::ifstream(f32)) GTEST_SKIP() << "../shared is not available";
  const std::string file = ::testing::TempDir() + "/kvasir_cli_rt_q4.gguf";
  ASSERT_EQ(kvasir({"quantize", f32, file, "q4_0"}).code, 0);
  const std::vector<std::string> gen = {"-p", "Once upon a time", "-n", "48", "--temp", "0.8", "--seed", "5"};
  std::vector<std::string> from_file = {"run", "-m", file};
  std::vector<std::string> in_memory = {"run", "-m", f32, "--quantize", "q4_0"};
  from_file.insert(from_file.end(), gen.begin(), gen.end());
  in_memory.insert(in_memory.end(), gen.begin(), gen.end());
  const auto a = kvasir(from_file), b = kvasir(in_memory), plain = kvasir({"run", "-m", f32, "-p", "Once upon a time", "-n", "48", "--temp", "0.8", "--seed", "5"});
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(b.out, plain.out);  // it did quantize: F32 samples another story
  EXPECT_NE(b.err.find("in memory"), std::string::npos) << b.err;
  const auto requant = kvasir({"run", "-m", file, "--quantize", "q8_0", "-p", "x", "-n", "1"});
  EXPECT_EQ(requant.code, 1);
  EXPECT_NE(requant.err.find("F32, F16 or BF16"), std::string::npos) << requant.err;
  std::remove(file.c_str());
}

// Model drafting from the command line: the same greedy text with a draft model, early exit and
// layer skipping as without; bad combinations and a draft of another vocabulary are refused
// with a message naming the problem.
TEST(Cli, ModelDraftsKeepTheTextAndBadDraftsAreRefused) {
  const std::string target = shared_path("models/stories260K.gguf");
  const std::vector<std::string> base = {"run", "-m", target, "-p", "Once upon a time", "-n", "40", "--temp", "0"};
  const auto plain = kvasir(base);
  ASSERT_EQ(plain.code, 0) << plain.err;
  for (const std::vector<std::string> extra :
       {std::vector<std::string>{"--draft-model", shared_path("models/stories260K-q4_0.gguf")},
        {"--spec", "early-exit", "--exit-layer", "3", "--no-spec-auto"},
        {"--spec", "layer-skip", "--skip-layers", "1,3", "--draft-head", "100"}}) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    const auto o = kvasir(args);
    EXPECT_EQ(o.code, 0) << o.err;
    EXPECT_EQ(o.out, plain.out) << extra[1];
    EXPECT_NE(o.err.find("speculation:"), std::string::npos) << o.err;
  }
  auto refused = [&](std::vector<std::string> extra, const std::string& says) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    const auto o = kvasir(args);
    EXPECT_EQ(o.code, 1) << extra[0];
    EXPECT_NE(o.err.find(says), std::string::npos) << o.err;
  };
  refused({"--spec", "draft"}, "--draft-model");
  refused({"--spec", "early-exit"}, "--exit-layer");
  refused({"--spec", "early-exit", "--exit-layer", "5"}, "exit layer must be in [1, 4]");
  refused({"--spec", "layer-skip", "--skip-layers", "2-x"}, "--skip-layers");
  refused({"--spec", "layer-skip", "--skip-layers", "0-4"}, "leaves at least one");
  refused({"--spec", "ngram", "--draft-head", "10"}, "--draft-head goes with");
  refused({"--spec", "ngram", "--spec-min-confidence", "0.3"}, "--spec-min-confidence goes with --spec head");
  refused({"--draft-model", shared_path("models/next/fixture-phi3-f16.gguf")}, "a draft must share the target's tokens");
  refused({"--draft-model", "/nonexistent.gguf"}, "--draft-model");
}

// `bench --kv-type A,B` alternates the types run by run from one computed depth (F16 and F32 here:
// stories260K's heads of 8 have no whole Q8_0 blocks). Each run must
// start back at the depth, so the logits after the last of several runs equal those of a single
// run that started there (a run that went on from the previous one's end would differ).
TEST(Cli, BenchAlternatesKvTypesFromOneDepth) {
  const std::string model = shared_path("models/stories260K.gguf");
  if (!std::ifstream(model)) GTEST_SKIP() << "../shared is not available";
  auto rows = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"bench", "-m", model, "-p", "8", "-n", "4", "-d", "64", "-t", "1", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto o = kvasir(args);
    EXPECT_EQ(o.code, 0) << o.err;
    return o.code == 0 ? nlohmann::json::parse(o.out) : nlohmann::json::array();
  };
  const auto both = rows({"-r", "3", "--kv-type", "f16,f32"});
  ASSERT_EQ(both.size(), 4u);
  const std::vector<std::string> tests = {"pp8@d64 kv F16", "pp8@d64 kv F32", "tg4@d64 kv F16", "tg4@d64 kv F32"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(both[i]["test"], tests[i]);
    EXPECT_EQ(both[i]["runs"].size(), 3u);
  }
  const auto f16 = rows({"-r", "1", "--no-warmup", "--kv-type", "f16"});
  const auto f32 = rows({"-r", "1", "--no-warmup", "--kv-type", "f32"});
  ASSERT_EQ(f16.size(), 2u);
  ASSERT_EQ(f32.size(), 2u);
  EXPECT_EQ(both[0]["logits_hash"], f16[0]["logits_hash"]);
  EXPECT_EQ(both[2]["logits_hash"], f16[1]["logits_hash"]);
  EXPECT_EQ(both[1]["logits_hash"], f32[0]["logits_hash"]);
  EXPECT_EQ(both[3]["logits_hash"], f32[1]["logits_hash"]);
  EXPECT_NE(both[2]["logits_hash"], both[3]["logits_hash"]);  // the types differ, each its own session
  const auto bad = kvasir({"bench", "-m", model, "-p", "8", "-n", "0", "--kv-type", "f16,bogus"});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("bogus"), std::string::npos) << bad.err;
}

// LoRA from the command line: synth-lora writes an adapter, run --lora uses it, export-lora merges
// it; the merged model's greedy text is the adapter's, and a foreign adapter is refused by name.
TEST(Cli, LoraRunEqualsTheMergedModel) {
  const std::string base = shared_path("models/stories260K.gguf");
  const std::string adapter = ::testing::TempDir() + "/cli_lora.gguf", merged = ::testing::TempDir() + "/cli_merged.gguf";
  ASSERT_EQ(kvasir({"synth-lora", "-m", base, "-o", adapter, "--rank", "8", "--alpha", "16", "--seed", "3"}).code, 0);
  ASSERT_EQ(kvasir({"export-lora", "-m", base, "--lora", adapter, "-o", merged}).code, 0);
  const std::vector<std::string> gen = {"-p", "Once upon a time", "-n", "24", "--temp", "0", "-t", "2"};
  auto with_args = std::vector<std::string>{"run", "-m", base, "--lora", adapter};
  with_args.insert(with_args.end(), gen.begin(), gen.end());
  auto merged_args = std::vector<std::string>{"run", "-m", merged};
  merged_args.insert(merged_args.end(), gen.begin(), gen.end());
  auto base_args = std::vector<std::string>{"run", "-m", base};
  base_args.insert(base_args.end(), gen.begin(), gen.end());
  const auto with = kvasir(with_args), m = kvasir(merged_args), plain = kvasir(base_args);
  ASSERT_EQ(with.code, 0) << with.err;
  EXPECT_EQ(with.out, m.out);
  EXPECT_NE(with.out, plain.out);
  const auto foreign = kvasir({"run", "-m", shared_path("models/fixture-gemma3-f32.gguf"), "--lora", adapter, "-p", "x", "-n", "2"});
  EXPECT_EQ(foreign.code, 1);
  EXPECT_NE(foreign.err.find("an adapter for 'llama'"), std::string::npos) << foreign.err;
  std::remove(adapter.c_str());
  std::remove(merged.c_str());
}

// `kvasir prune` as a user runs it: layers chosen on a text and removed, the report in JSON, the
// result loadable and evaluated; bad requests exit 1 naming the problem.
TEST(Cli, PruneRemovesLayersAndReports) {
  const std::string model = shared_path("models/stories260K.gguf"), text = shared_path("golden/perplexity/stories-sampled.txt");
  if (!std::ifstream(model) || !std::ifstream(text)) GTEST_SKIP() << "../shared is not available";
  const std::string out = ::testing::TempDir() + "/kvasir_cli_pruned.gguf";
  const auto r = kvasir({"prune", model, out, "--remove-layers", "2", "-f", text, "-c", "128", "--calib-chunks", "2",
                         "--eval", text, "--eval-chunks", "4", "--json", "-t", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layers_in"], 5);
  EXPECT_EQ(j["layers_out"], 3);
  ASSERT_EQ(j["removed_layers"].size(), 2u);
  EXPECT_NE(j["removed_layers"][1], 4);  // never the last layer
  EXPECT_EQ(j["layer_distance"].size(), 5u);
  EXPECT_LT(j["bytes_out"].get<double>(), j["bytes_in"].get<double>());
  EXPECT_GT(j["eval"]["kld"].get<double>(), 0.0);
  EXPECT_GT(j["eval"]["same_top1"].get<double>(), 0.2);
  const auto gen = kvasir({"run", "-m", out, "-p", "Once upon a time", "-n", "8", "--temp", "0"});
  EXPECT_EQ(gen.code, 0) << gen.err;
  const auto nothing = kvasir({"prune", model, out});
  EXPECT_EQ(nothing.code, 1);
  EXPECT_NE(nothing.err.find("nothing to prune"), std::string::npos) << nothing.err;
  const auto no_text = kvasir({"prune", model, out, "--method", "wanda", "--sparsity", "0.5"});
  EXPECT_EQ(no_text.code, 1);
  EXPECT_NE(no_text.err.find("-f TEXT"), std::string::npos) << no_text.err;
  const auto bad_nm = kvasir({"prune", model, out, "--nm", "4:2"});
  EXPECT_EQ(bad_nm.code, 1);
  EXPECT_NE(bad_nm.err.find("N:M"), std::string::npos) << bad_nm.err;
}

// `kvasir distill --head` then `kvasir run --spec head`: the head trains (held-out KL falls, top-1
// agreement rises), the run with it prints exactly the plain run's text, and bad requests exit 1
// naming the problem (a head for other weights is refused at load).
// On-policy data: the teacher continues a file of openings (sampled, then greedily from each
// sample's first words) and the head trains on those texts; the count of texts and tokens is
// exact, training lowers the held-out KL, and a file without openings is refused.
TEST(Cli, DistillOnTheTeachersOwnContinuations) {
  const std::string model = shared_path("models/stories260K.gguf");
  if (!std::ifstream(model)) GTEST_SKIP() << "../shared is not available";
  const std::string dir = ::testing::TempDir() + "/kvasir_cli_prompts_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/prompts.txt") << "Once upon a time\n\nThe little dog\nLily wanted to\n  \nTom and Sam went\nOne day, a bird\n";
  const auto r = kvasir({"distill", "--teacher", model, "--head", "-o", dir + "/head.gguf", "--prompts", dir + "/prompts.txt",
                         "--samples", "3", "--gen-tokens", "96", "--gen-greedy", "-c", "128", "--steps", "150", "--batch", "32",
                         "--lr", "3e-3", "--head-tokens", "512", "--head-ffn", "64", "--eval-every", "0", "--json", "-t", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["generated_texts"], 5 * 3 * 2);
  // Sampled texts may end early at an end-of-text token; the greedy ones run 96 - 24 tokens at most.
  EXPECT_GT(j["generated_tokens"].get<int64_t>(), 5 * 3 * 48);
  EXPECT_LE(j["generated_tokens"].get<int64_t>(), 5 * 3 * (96 + 72));
  EXPECT_LT(j["after"]["kl"].get<double>(), 0.7 * j["before"]["kl"].get<double>());
  std::ofstream(dir + "/empty.txt") << "\n   \n";
  const auto empty = kvasir({"distill", "--teacher", model, "--head", "-o", dir + "/h2.gguf", "--prompts", dir + "/empty.txt"});
  EXPECT_EQ(empty.code, 1);
  EXPECT_NE(empty.err.find("no prompts"), std::string::npos) << empty.err;
  const auto none = kvasir({"distill", "--teacher", model, "--head", "-o", dir + "/h2.gguf"});
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("--prompts"), std::string::npos) << none.err;
  std::filesystem::remove_all(dir);
}

// The chain: prune (a layer removed), distil (the pruned copy healed toward the input), quantize
// (GPTQ to Q8_0 behind its gate), one table. The input row is the reference (KLD 0, acceptance 1),
// the pruned row pays in KLD and acceptance, the distilled row wins part of it back, the quantized
// row is smaller and close to the distilled one; the intermediate files are gone. A gate that
// refuses ends the chain with no output, and a chain with nothing to do is refused.
TEST(Cli, CompressChainsPruneAndQuantizeIntoOneTable) {
  const std::string model = shared_path("models/stories260K.gguf"), text = shared_path("golden/perplexity/stories-sampled.txt");
  if (!std::ifstream(model) || !std::ifstream(text)) GTEST_SKIP() << "../shared is not available";
  const std::string out = ::testing::TempDir() + "/kvasir_cli_compress_" + std::to_string(getpid()) + ".gguf";
  const auto r = kvasir({"compress", model, out, "--prune", "--remove-layers 1", "--distill-steps", "200", "--type", "q8_0",
                         "--method", "gptq", "--max-kld", "0.05", "--calib-text", text, "--eval-text", text, "-c", "128", "--eval-chunks", "40",
                         "--bench-reps", "1", "--json", "-t", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["stages"].size(), 4u);
  const auto &in = j["stages"][0], &pruned = j["stages"][1], &healed = j["stages"][2], &q = j["stages"][3];
  EXPECT_EQ(j["prune"]["layers_out"].get<int>(), j["prune"]["layers_in"].get<int>() - 1);
  EXPECT_EQ(in["kld"].get<double>(), 0.0);
  EXPECT_EQ(in["draft_acceptance"].get<double>(), 1.0);
  EXPECT_GT(pruned["kld"].get<double>(), 0.05);
  EXPECT_LT(pruned["draft_acceptance"].get<double>(), 0.95);
  EXPECT_GT(pruned["draft_acceptance"].get<double>(), 0.2);
  EXPECT_LT(pruned["mib"].get<double>(), in["mib"].get<double>());
  EXPECT_LT(healed["kld"].get<double>(), 0.9 * pruned["kld"].get<double>());
  EXPECT_GT(healed["draft_acceptance"].get<double>(), pruned["draft_acceptance"].get<double>());
  EXPECT_LT(j["distill"]["after"]["kl"].get<double>(), j["distill"]["before"]["kl"].get<double>());
  EXPECT_LT(q["mib"].get<double>(), 0.5 * pruned["mib"].get<double>());
  EXPECT_NEAR(q["kld"].get<double>(), healed["kld"].get<double>(), 0.05);
  EXPECT_GT(q["tokens_per_s"].get<double>(), 0.0);
  EXPECT_TRUE(std::ifstream(out).good());
  EXPECT_FALSE(std::ifstream(out + ".pruned.gguf").good());
  EXPECT_FALSE(std::ifstream(out + ".distilled.gguf").good());
  std::remove(out.c_str());
  const auto both = kvasir({"distill", "--teacher", model, "--head", "--student", model, "-o", out, "-f", text});
  EXPECT_EQ(both.code, 1);
  EXPECT_NE(both.err.find("--student"), std::string::npos) << both.err;
  const auto unpruned = kvasir({"compress", model, out, "--distill-steps", "10", "--type", "q8_0", "--eval-text", text});
  EXPECT_EQ(unpruned.code, 1);
  EXPECT_NE(unpruned.err.find("give --prune"), std::string::npos) << unpruned.err;
  const auto gated = kvasir({"compress", model, out, "--prune", "--remove-layers 1", "--type", "q4_0", "--max-kld", "0.000001",
                             "--calib-text", text, "--eval-text", text, "-c", "128", "-t", "2"});
  EXPECT_EQ(gated.code, 1);
  EXPECT_NE(gated.err.find("exceeds --max-kld"), std::string::npos) << gated.err;
  EXPECT_FALSE(std::ifstream(out).good());
  EXPECT_FALSE(std::ifstream(out + ".pruned.gguf").good());  // a chain that fails leaves nothing behind
  const auto nothing = kvasir({"compress", model, out, "--eval-text", text});
  EXPECT_EQ(nothing.code, 1);
  EXPECT_NE(nothing.err.find("nothing to do"), std::string::npos) << nothing.err;
}

TEST(Cli, DistillAHeadAndDraftWithIt) {
  const std::string model = shared_path("models/stories260K.gguf"), text = shared_path("golden/perplexity/stories-sampled.txt");
  const std::string other = shared_path("models/stories260K-q8_0.gguf");
  if (!std::ifstream(model) || !std::ifstream(text) || !std::ifstream(other)) GTEST_SKIP() << "../shared is not available";
  const std::string head = ::testing::TempDir() + "/kvasir_cli_head_" + std::to_string(getpid()) + ".gguf";
  const auto r = kvasir({"distill", "--teacher", model, "--head", "-o", head, "-f", text, "-c", "128", "--steps", "200",
                         "--batch", "32", "--lr", "3e-3", "--head-tokens", "512", "--head-ffn", "64", "--eval-every", "100",
                         "--json", "-t", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_LT(j["after"]["kl"].get<double>(), 0.7 * j["before"]["kl"].get<double>());
  EXPECT_GT(j["after"]["accept"].get<double>(), j["before"]["accept"].get<double>() + 0.15);
  EXPECT_EQ(j["curve"].size(), 2u);
  const std::vector<std::string> gen = {"run", "-m", model, "-p", "Once upon a time", "-n", "40", "--temp", "0", "-t", "2"};
  const auto plain = kvasir(gen);
  auto with = gen;
  with.insert(with.end(), {"--spec", "head", "--draft-head-file", head, "--no-spec-auto", "--spec-k", "2"});
  const auto drafted = kvasir(with);
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(drafted.code, 0) << drafted.err;
  EXPECT_EQ(drafted.out, plain.out);
  EXPECT_NE(drafted.err.find("speculation:"), std::string::npos) << drafted.err;
  // Without --spec-k the head drafts up to 5 tokens a step (4 for the other methods): with its
  // confidence cut off and no controller, every step drafts 5.
  auto deep = gen;
  deep.insert(deep.end(), {"--spec", "head", "--draft-head-file", head, "--no-spec-auto", "--spec-min-confidence", "0"});
  const auto five = kvasir(deep);
  ASSERT_EQ(five.code, 0) << five.err;
  EXPECT_EQ(five.out, plain.out);
  const std::string positions = five.err.substr(std::min(five.err.find("acceptance by draft position:"), five.err.size()));
  EXPECT_NE(positions.find(" 4: "), std::string::npos) << five.err;
  EXPECT_EQ(positions.find(" 5: "), std::string::npos) << five.err;
  auto foreign = with;
  foreign[2] = other;  // same shape, other weights
  const auto refused = kvasir(foreign);
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.err.find("trained for other weights"), std::string::npos) << refused.err;
  // Resume: a checkpoint carries its step; training goes on from there to --steps.
  const std::string resumed = head + ".resumed.gguf";
  const auto more = kvasir({"distill", "--teacher", model, "--head", "-o", resumed, "--resume", head, "-f", text, "-c", "128",
                            "--steps", "260", "--batch", "32", "--lr", "1e-3", "--eval-every", "0", "--json", "-t", "2"});
  ASSERT_EQ(more.code, 0) << more.err;
  const auto m = nlohmann::json::parse(more.out);
  EXPECT_EQ(m["steps"], 60);
  EXPECT_LE(m["after"]["kl"].get<double>(), j["after"]["kl"].get<double>() * 1.05);
  // Both of two drafts kept is part of every evaluation, and never more often than the first.
  EXPECT_GT(j["after"]["accept2"].get<double>(), 0.0);
  EXPECT_LE(j["after"]["accept2"].get<double>(), j["after"]["accept"].get<double>());
  const auto unrolled = kvasir({"distill", "--teacher", model, "--head", "-o", resumed, "--resume", head, "-f", text, "-c",
                                "128", "--steps", "230", "--batch", "16", "--unroll", "3", "--eval-every", "0", "--json", "-t", "2"});
  ASSERT_EQ(unrolled.code, 0) << unrolled.err;
  EXPECT_EQ(nlohmann::json::parse(unrolled.out)["steps"], 30);
  const auto too_deep = kvasir({"distill", "--teacher", model, "--head", "-o", resumed, "-f", text, "--unroll", "9"});
  EXPECT_NE(too_deep.code, 0);
  EXPECT_NE(too_deep.err.find("--unroll"), std::string::npos) << too_deep.err;
  const auto student = kvasir({"distill", "--teacher", model, "--student", head, "-o", resumed, "-f", text, "--unroll", "2"});
  EXPECT_EQ(student.code, 1);
  EXPECT_NE(student.err.find("go with --head"), std::string::npos) << student.err;
  const auto done = kvasir({"distill", "--teacher", model, "--head", "-o", resumed, "--resume", head, "-f", text, "-c", "128",
                            "--steps", "100"});
  EXPECT_EQ(done.code, 1);
  EXPECT_NE(done.err.find("already"), std::string::npos) << done.err;
  std::remove(resumed.c_str());
  const auto no_kind = kvasir({"distill", "--teacher", model, "-o", head, "-f", text});
  EXPECT_EQ(no_kind.code, 1);
  EXPECT_NE(no_kind.err.find("--head"), std::string::npos) << no_kind.err;
  const auto no_file = kvasir({"run", "-m", model, "-p", "x", "--spec", "head"});
  EXPECT_EQ(no_file.code, 1);
  EXPECT_NE(no_file.err.find("--draft-head-file"), std::string::npos) << no_file.err;
  std::remove(head.c_str());
}
