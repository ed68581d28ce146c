// `kvasir logits -m MODEL --ids 1,2,3 [--top K] [--all] [--greedy N]`: evaluates the ids as one
// sequence and prints JSON shaped like a case of the golden files, to compare engines.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <numeric>
#include <algorithm>

#include "cli/common.h"
#include "cli/commands.h"
#include "backends/runner_factory.h"
#include "sample/sampler.h"

namespace kvasir::cli {

namespace {

struct LogitsArgs {
  std::string model;
  std::string ids;
  int top = 10;
  bool all = false;
  int greedy = 0;
  int threads = 0;
  std::string kv_type = "f16";
};

int run_logits(const LogitsArgs& a) {
  auto ids = parse_id_list(a.ids);
  if (!ids) return fail(ids.error());
  if (ids->empty()) return fail("--ids is empty");
  auto model = Model::load(a.model);
  if (!model) return fail(model.error());
  auto kv_type = parse_kv_type(a.kv_type);
  if (!kv_type) return fail(kv_type.error());
  const int64_t n_vocab = (*model)->config().n_vocab;
  const int64_t n_ctx = int64_t(ids->size()) + a.greedy;
  auto session = backends::create_session(**model, {.n_ctx = n_ctx, .n_threads = a.threads, .kv = {.type = *kv_type}});
  if (!session) return fail(session.error());

  nlohmann::json positions = nlohmann::json::array();
  std::vector<float> last(static_cast<size_t>(n_vocab));
  std::vector<int32_t> order(static_cast<size_t>(n_vocab));
  auto record = [&](int64_t, const float* logits) {
    std::iota(order.begin(), order.end(), 0);
    const size_t k = std::min<size_t>(size_t(std::max(a.top, 0)), order.size());
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t x, int32_t y) {
      return logits[x] > logits[y] || (logits[x] == logits[y] && x < y);
    });
    nlohmann::json top = nlohmann::json::array();
    for (size_t i = 0; i < k; ++i) top.push_back({order[i], logits[order[i]]});
    nlohmann::json pos = {{"top", top}};
    if (a.all) pos["logits"] = std::vector<float>(logits, logits + n_vocab);
    positions.push_back(std::move(pos));
    std::copy(logits, logits + n_vocab, last.begin());
  };
  if (auto s = (*session)->eval(*ids, true, record); !s) return fail(s.error());

  std::vector<int32_t> greedy;
  for (int i = 0; i < a.greedy; ++i) {
    const int32_t next = argmax(last);
    greedy.push_back(next);
    const int32_t tok[1] = {next};
    if (auto s = (*session)->eval(tok, false, [&](int64_t, const float* l) { std::copy(l, l + n_vocab, last.begin()); }); !s)
      return fail(s.error());
  }
  nlohmann::json out = {{"prompt_ids", *ids}, {"positions", positions}, {"greedy_ids", greedy}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

void register_logits(CLI::App& app, Handler& handler) {
  auto a = std::make_shared<LogitsArgs>();
  auto* cmd = app.add_subcommand("logits", "Evaluate token ids and print logits as JSON");
  cmd->add_option("-m,--model", a->model, "GGUF model")->required();
  cmd->add_option("--ids", a->ids, "Comma-separated token ids")->required();
  cmd->add_option("--top", a->top, "Top logits per position");
  cmd->add_flag("--all", a->all, "Include every logit of every position");
  cmd->add_option("--greedy", a->greedy, "Continue N tokens by argmax")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
  cmd->add_option("--kv-type", a->kv_type, "KV cache type: f16, f32, q8_0 or q4_0 (4-bit K is stored Hadamard-rotated)");
  cmd->callback([&handler, a] { handler = [a] { return run_logits(*a); }; });
}

}  // namespace kvasir::cli
