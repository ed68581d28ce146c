#include "eval/kv_guard.h"

#include <algorithm>
#include <numeric>

#include "eval/perplexity.h"
#include "model/forward.h"
#include "model/kv_cache.h"

namespace kvasir::eval {

const char* const kKvGuardText =
    "The lighthouse stood at the end of a long spit of sand, and for most of the year the keeper saw nobody but the "
    "man who brought oil and flour on the first Monday of each month. He did not mind. He had come to the coast after "
    "thirty years of keeping accounts for a shipping firm in the city, and the quiet suited him better than he had "
    "expected. In the mornings he walked the beach and wrote down what the tide had left: planks, rope, once a crate of "
    "oranges, still sound, which he ate for a week. In the afternoons he cleaned the lens, trimmed the wicks and read. "
    "The firm had given him a clock when he left, a heavy brass thing that ran five minutes fast no matter how he set "
    "it, and he kept it on the shelf above the stove so that he would always think it later than it was.\n\n"
    "A storm came in the third winter. It began as a low grey line on the horizon at noon and by four o'clock the rain "
    "was moving sideways across the glass. He lit the lamp early. Through the night the wind pushed at the tower as if "
    "it meant to lean it over, and twice he heard something heavy strike the rocks below. At dawn he went down with a "
    "lantern and found a small boat turned on its side, its mast snapped, and a young woman sitting in the lee of it "
    "with her arms around her knees. She said her name was Ellen, that she had been sailing from the island to the "
    "mainland to see a doctor, and that she had lost her oars when the first wave came over the bow.\n\n"
    "He took her up to the tower, gave her dry clothes and soup, and let her sleep in the chair by the stove. When she "
    "woke she asked about the clock, and he explained that it was always five minutes fast. She laughed and said that "
    "her father had owned one just like it, which he had also never managed to correct, and that her mother used to "
    "say it was the only honest clock in the house because it admitted it was wrong. The supply boat came two days "
    "later. Before she left she wrote her address on the back of an envelope and asked him to send word if the boat "
    "could be mended. It could, as it turned out, though it took him most of the spring, and in June he sailed it "
    "across to the island himself, slowly, keeping well inside the line of the reef.\n\n"
    "People sometimes ask what a lighthouse keeper does all day, as though the light looks after itself. The truth is "
    "that the work is small and constant: oil to be carried up, glass to be polished, logs to be written, weather to be "
    "watched. None of it is difficult, and all of it matters, because the one night you neglect it is the night a ship "
    "needs the light. He came to think that most of the important work in the world was like that, and that the people "
    "who did it well were rarely the ones anybody wrote about.";

Result<KvGuardResult> kv_guard(const Model& model, std::span<const int32_t> tokens, const KvGuardOptions& o) {
  const ModelConfig& c = model.config();
  const int64_t L = c.n_layers, n = o.n_ctx, first = n / 2;  // the second half of the chunk is scored
  if (n < 16 || int64_t(tokens.size()) < n)
    return Error{"KV guard: the text has " + std::to_string(tokens.size()) + " tokens, fewer than its chunk of " +
                     std::to_string(n),
                 ErrorCode::invalid_argument};
  // One chunk through one Forward: the F16 reference's logits once, then each candidate's KV
  // cache in turn (a fresh cache per candidate; the weights and buffers are shared).
  Forward fwd(model, {.max_batch_tokens = n, .num_threads = o.num_threads});
  constexpr int64_t kBlock = 16;
  std::vector<int32_t> table(static_cast<size_t>((n + kBlock - 1) / kBlock));
  for (size_t i = 0; i < table.size(); ++i) table[i] = int32_t(i);
  Batch batch;
  batch.add_sequence(table);
  for (int64_t t = 0; t < n; ++t) batch.add(t == 0 && o.bos >= 0 ? o.bos : tokens[size_t(t)], int32_t(t), 0, t >= first && t + 1 < n);
  const int64_t V = c.n_vocab, rows = n - 1 - first;
  auto run = [&](const std::vector<DType>& types) -> Result<const float*> {
    auto kv = KvCache::create(c, {.n_blocks = int64_t(table.size()), .block_size = kBlock, .type = o.type,
                                  .layer_types = types, .rotate_k = o.rotate_k, .transform = o.transform});
    if (!kv) return Error{"KV guard: " + kv.error(), kv.error_code()};
    return fwd.forward(batch, *kv);
  };
  auto base = run(std::vector<DType>(size_t(L), DType::F16));
  if (!base) return Error{base.error()};
  const std::vector<float> reference(*base, *base + rows * V);
  auto measure = [&](const std::vector<DType>& types) -> Result<double> {
    auto logits = run(types);
    if (!logits) return Error{logits.error()};
    KlStats k;
    for (int64_t r = 0; r < rows; ++r)
      k.add({reference.data() + r * V, size_t(V)}, {*logits + r * V, size_t(V)}, tokens[size_t(first + r + 1)]);
    return k.mean_kld();
  };
  KvGuardResult g;
  g.layer_types.assign(size_t(L), o.type);
  auto all = measure(g.layer_types);
  if (!all) return Error{all.error()};
  g.kld = g.kld_all = *all;
  g.quantized_layers = L;
  if (*all <= o.max_kld) return g;
  // Each layer's own cost, then the fewest fallbacks (most costly first) that meet the budget.
  std::vector<double> own(static_cast<size_t>(L));
  for (int64_t il = 0; il < L; ++il) {
    std::vector<DType> one(size_t(L), DType::F16);
    one[size_t(il)] = o.type;
    auto k = measure(one);
    if (!k) return Error{k.error()};
    own[size_t(il)] = *k;
  }
  std::vector<int64_t> order(static_cast<size_t>(L));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return own[size_t(a)] > own[size_t(b)]; });
  auto with_fallbacks = [&](int64_t k) {
    std::vector<DType> t(size_t(L), o.type);
    for (int64_t i = 0; i < k; ++i) t[size_t(order[size_t(i)])] = DType::F16;
    return t;
  };
  int64_t lo = 0, hi = L;  // lo fails the budget; hi (all F16) meets it
  double kld_hi = 0;
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    auto k = measure(with_fallbacks(mid));
    if (!k) return Error{k.error()};
    if (*k <= o.max_kld) hi = mid, kld_hi = *k;
    else lo = mid;
  }
  g.layer_types = with_fallbacks(hi);
  g.kld = kld_hi;
  g.quantized_layers = L - hi;
  return g;
}

}  // namespace kvasir::eval
