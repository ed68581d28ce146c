// KV blocks between two engines over UCX on loopback, as a prefill and a decode instance exchange
// them: the prefill engine pins a finished prompt's blocks, the decode engine reserves blocks,
// receives them, commits them to its prefix cache, and then generates exactly what one engine
// alone generates, computing only the prompt's last partial block. Faults end each transfer in
// one state within its deadline, and every block comes back.
#include <gtest/gtest.h>

#include <filesystem>

#include "backends/engine_factory.h"
#include "disagg/kv_transfer.h"
#include "disagg/prefill_service.h"
#include "engine/engine.h"

using namespace kvasir;
using namespace std::chrono_literals;

namespace {

std::string default_model() { return std::string(KVASIR_SOURCE_DIR) + "/models/gemma-3-270m-q4_k_m.gguf"; }

struct Fixture {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tok;
};

Fixture load(const std::string& path) {
  Fixture f;
  if (!std::filesystem::exists(path)) return f;
  auto m = Model::load(path);
  EXPECT_TRUE(m.ok()) << m.error();
  auto t = Tokenizer::from_gguf((*m)->gguf());
  EXPECT_TRUE(t.ok());
  f.model = std::move(*m);
  f.tok = std::make_unique<Tokenizer>(std::move(*t));
  return f;
}

std::unique_ptr<engine::Engine> make_engine(const Fixture& f, DType kv_type = DType::F16) {
  auto core = backends::create_engine_core(
      *f.model, *f.tok,
      {.engine = {.max_batch_tokens = 64, .max_seqs = 4, .num_threads = 2}, .kv = {.n_blocks = 64, .type = kv_type}});
  EXPECT_TRUE(core.ok()) << core.error();
  return std::make_unique<engine::Engine>(std::move(*core));
}

// Every delta of one request, merged.
engine::Delta run(engine::Engine& e, engine::GenerationParams p) {
  auto s = e.submit(std::move(p));
  EXPECT_TRUE(s.ok()) << s.error();
  engine::Delta all, d;
  while ((*s)->next(d)) {
    all.tokens.insert(all.tokens.end(), d.tokens.begin(), d.tokens.end());
    if (d.finish != engine::FinishReason::None) {
      all.finish = d.finish;
      all.usage = d.usage;
      all.kv_hold = d.kv_hold;
      all.kv_blocks = d.kv_blocks;
    }
  }
  return all;
}

engine::GenerationParams greedy(std::vector<int32_t> prompt, int32_t n) {
  engine::GenerationParams p;
  p.prompt = std::move(prompt);
  p.sampling = {.temperature = 0.f};
  p.stop = {.max_tokens = n, .ignore_eos = true};
  return p;
}

struct Decode {
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<disagg::KvReceiver> rx;
  std::unique_ptr<disagg::UcxNode> node;
};

Decode make_decode(const Fixture& f, DType kv_type = DType::F16) {
  Decode d;
  d.engine = make_engine(f, kv_type);
  d.rx = std::make_unique<disagg::KvReceiver>(d.engine->runner());
  auto* rx = d.rx.get();
  auto node = disagg::UcxNode::create(
      {.listen_host = "127.0.0.1"},
      {.on_message = [rx](disagg::PeerId p, std::span<const uint8_t> h, std::span<const uint8_t> b) { rx->on_message(p, h, b); },
       .on_peer_down = [rx](disagg::PeerId p, const std::string&) { rx->on_peer_down(p); }});
  EXPECT_TRUE(node.ok()) << node.error();
  d.node = std::move(*node);
  return d;
}

sched::Scheduler::KvReservation reserve(engine::Engine& e, int64_t hold, const std::vector<int32_t>& prompt) {
  Result<sched::Scheduler::KvReservation> r = Error{"not run"};
  EXPECT_TRUE(e.call([&](engine::EngineCore& c) { r = c.reserve_kv(hold, prompt, ""); }));
  EXPECT_TRUE(r.ok()) << r.error();
  return r.ok() ? *r : sched::Scheduler::KvReservation{};
}

int64_t blocks_used(engine::Engine& e) {
  int64_t used = -1;
  e.call([&](engine::EngineCore& c) { used = c.stats().kv_blocks_used; });
  return used;
}

std::vector<int32_t> long_prompt(const Tokenizer& tok) {
  return tok.encode(
      "The old lighthouse keeper climbed the spiral stairs every evening, counting the steps as his father had "
      "taught him, and at the top he wiped the great lens clean of salt before lighting the lamp. Ships passed "
      "far out on the dark water, and he wrote each one in his book with the hour and the wind.");
}

}  // namespace

TEST(KvTransfer, DecodeContinuesExactlyAsOneEngine) {
  Fixture f = load(default_model());
  if (!f.model) GTEST_SKIP() << "the default model is not downloaded";
  const auto prompt = long_prompt(*f.tok);
  ASSERT_GT(prompt.size(), 48u);
  auto alone = make_engine(*&f);
  const engine::Delta ref = run(*alone, greedy(prompt, 16));

  auto prefill = make_engine(f);
  Decode decode = make_decode(f);
  const int64_t hold = decode.engine->new_hold_id();
  const auto res = reserve(*decode.engine, hold, prompt);
  ASSERT_EQ(res.n_cached, 0);
  ASSERT_EQ(res.blocks.size(), prompt.size() / 16);
  const uint64_t id = 77;
  ASSERT_TRUE(decode.rx->expect(id, res.blocks).ok());

  engine::GenerationParams p = greedy(prompt, 0);
  p.pin_kv = true;
  const engine::Delta pinned = run(*prefill, p);
  ASSERT_NE(pinned.kv_hold, 0);
  ASSERT_EQ(pinned.kv_blocks.size(), res.blocks.size());

  auto sender = disagg::UcxNode::create({}, {});
  ASSERT_TRUE(sender.ok()) << sender.error();
  auto peer = (*sender)->connect("127.0.0.1", decode.node->port(), 5s);
  ASSERT_TRUE(peer.ok()) << peer.error();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  // Small frames: several per layer, as a long prompt would send.
  const Status sent = disagg::send_kv(**sender, *peer, id, prefill->runner(), pinned.kv_blocks,
                                      {.deadline = deadline, .max_frame_bytes = 3 * prefill->runner().kv_block_bytes(0)});
  ASSERT_TRUE(sent.ok()) << sent.error();
  prefill->call([&](engine::EngineCore& c) { c.release_kv(pinned.kv_hold); });
  std::string why;
  ASSERT_EQ(decode.rx->wait(id, deadline, &why), disagg::TransferEnd::done) << why;
  decode.engine->call([&](engine::EngineCore& c) {
    EXPECT_TRUE(c.commit_kv(hold, prompt).ok());
    c.release_kv(hold);
  });

  const engine::Delta got = run(*decode.engine, greedy(prompt, 16));
  EXPECT_EQ(got.tokens, ref.tokens);
  // Every full block came from the prefill instance (a hit stops a token short of the prompt).
  EXPECT_EQ(got.usage.cached_tokens, int32_t((prompt.size() - 1) / 16 * 16));
  EXPECT_EQ(decode.rx->counters().done, 1);
  EXPECT_EQ(decode.rx->counters().bytes,
            int64_t(res.blocks.size() * decode.engine->runner().kv_block_bytes(0) * size_t(f.model->config().n_layers)));
  EXPECT_EQ(blocks_used(*prefill), 0);
  EXPECT_EQ(blocks_used(*decode.engine), 0);
}

TEST(KvTransfer, CommittingBlocksThatNeverArrivedChangesTheOutput) {
  // The check above can fail: the same steps without the transfer give other tokens.
  Fixture f = load(default_model());
  if (!f.model) GTEST_SKIP() << "the default model is not downloaded";
  const auto prompt = long_prompt(*f.tok);
  auto alone = make_engine(f);
  const engine::Delta ref = run(*alone, greedy(prompt, 16));
  auto decode = make_engine(f);
  const int64_t hold = decode->new_hold_id();
  (void)reserve(*decode, hold, prompt);
  decode->call([&](engine::EngineCore& c) {
    EXPECT_TRUE(c.commit_kv(hold, prompt).ok());
    c.release_kv(hold);
  });
  const engine::Delta got = run(*decode, greedy(prompt, 16));
  EXPECT_NE(got.tokens, ref.tokens);
}

TEST(KvTransfer, FaultsEndWithinTheDeadlineAndFreeEveryBlock) {
  Fixture f = load(default_model());
  if (!f.model) GTEST_SKIP() << "the default model is not downloaded";
  const auto prompt = long_prompt(*f.tok);
  Decode decode = make_decode(f);
  auto prefill = make_engine(f);
  engine::GenerationParams p = greedy(prompt, 0);
  p.pin_kv = true;
  const engine::Delta pinned = run(*prefill, p);

  // 1. Nothing is sent: the transfer expires at its deadline.
  {
    const int64_t hold = decode.engine->new_hold_id();
    const auto res = reserve(*decode.engine, hold, prompt);
    ASSERT_TRUE(decode.rx->expect(1, res.blocks).ok());
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(decode.rx->wait(1, t0 + 300ms), disagg::TransferEnd::expired);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
    decode.engine->call([&](engine::EngineCore& c) { c.release_kv(hold); });
  }
  auto sender = disagg::UcxNode::create({}, {});
  ASSERT_TRUE(sender.ok());
  auto peer = (*sender)->connect("127.0.0.1", decode.node->port(), 5s);
  ASSERT_TRUE(peer.ok()) << peer.error();
  // 2. A sender whose KV format differs (Q8_0 against F16) is refused.
  {
    auto other = make_engine(f, DType::Q8_0);
    const engine::Delta other_pin = run(*other, p);
    const int64_t hold = decode.engine->new_hold_id();
    const auto res = reserve(*decode.engine, hold, prompt);
    ASSERT_TRUE(decode.rx->expect(2, res.blocks).ok());
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    (void)disagg::send_kv(**sender, *peer, 2, other->runner(), other_pin.kv_blocks, {.deadline = deadline});
    std::string why;
    EXPECT_EQ(decode.rx->wait(2, deadline, &why), disagg::TransferEnd::failed);
    EXPECT_NE(why.find("format"), std::string::npos) << why;
    decode.engine->call([&](engine::EngineCore& c) { c.release_kv(hold); });
    other->call([&](engine::EngineCore& c) { c.release_kv(other_pin.kv_hold); });
  }
  // 3. Hostile frames: an unknown transfer, and blocks beyond the transfer's list.
  {
    const int64_t hold = decode.engine->new_hold_id();
    const auto res = reserve(*decode.engine, hold, prompt);
    ASSERT_TRUE(decode.rx->expect(3, {res.blocks[0]}).ok());
    const uint64_t fmt = disagg::hash_format(decode.engine->runner().kv_format());
    const uint32_t bb = uint32_t(decode.engine->runner().kv_block_bytes(0));
    (*sender)->send(*peer, disagg::encode_header({.kind = disagg::FrameKind::done, .transfer_id = 999, .format_hash = fmt}),
                    nullptr, {});
    (*sender)->send(*peer,
                    disagg::encode_header({.kind = disagg::FrameKind::blocks, .transfer_id = 3, .first = 1, .n_blocks = 1,
                                           .block_bytes = bb, .format_hash = fmt}),
                    std::make_shared<std::vector<uint8_t>>(bb), {});
    std::string why;
    EXPECT_EQ(decode.rx->wait(3, std::chrono::steady_clock::now() + 5s, &why), disagg::TransferEnd::failed);
    EXPECT_GE(decode.rx->counters().rejected_frames, 2);
    decode.engine->call([&](engine::EngineCore& c) { c.release_kv(hold); });
  }
  // 4. The sender dies mid-transfer: the receiver ends the transfer within its deadline.
  {
    const int64_t hold = decode.engine->new_hold_id();
    const auto res = reserve(*decode.engine, hold, prompt);
    ASSERT_TRUE(decode.rx->expect(4, res.blocks).ok());
    const uint64_t fmt = disagg::hash_format(decode.engine->runner().kv_format());
    const uint32_t bb = uint32_t(decode.engine->runner().kv_block_bytes(0));
    (*sender)->send(*peer,
                    disagg::encode_header({.kind = disagg::FrameKind::blocks, .transfer_id = 4, .n_blocks = 1,
                                           .block_bytes = bb, .format_hash = fmt}),
                    std::make_shared<std::vector<uint8_t>>(bb), {});
    sender->reset();
    const auto t0 = std::chrono::steady_clock::now();
    const disagg::TransferEnd e = decode.rx->wait(4, t0 + 1s);
    EXPECT_NE(e, disagg::TransferEnd::done);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
    decode.engine->call([&](engine::EngineCore& c) { c.release_kv(hold); });
  }
  prefill->call([&](engine::EngineCore& c) { c.release_kv(pinned.kv_hold); });
  EXPECT_EQ(decode.rx->n_active(), 0u);
  EXPECT_EQ(blocks_used(*decode.engine), 0);
  EXPECT_EQ(blocks_used(*prefill), 0);
}

// The prefill instance's pusher: a prompt of several chunks is sent chunk by chunk while it is
// computed, and the decode engine then generates exactly what one engine alone does; a longer
// prompt that shares the first one's blocks sends only those the decode engine lacks.
TEST(KvTransfer, ThePusherStreamsChunksAndSendsOnlyMissingBlocks) {
  Fixture f = load(default_model());
  if (!f.model) GTEST_SKIP() << "the default model is not downloaded";
  std::vector<int32_t> prompt = long_prompt(*f.tok);
  prompt.insert(prompt.end(), prompt.begin() + 1, prompt.end());  // ~120 tokens: two chunks of 64
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), prompt.begin() + 1, prompt.begin() + 40);
  auto alone = make_engine(f);
  auto prefill = make_engine(f);
  auto pusher = disagg::KvPusher::create(*prefill);
  ASSERT_TRUE(pusher.ok()) << pusher.error();
  Decode decode = make_decode(f);
  int32_t n_cached = 0;  // the last pull's blocks that the decode engine held already
  auto pull = [&](const std::vector<int32_t>& tokens, uint64_t id) {
    const int64_t hold = decode.engine->new_hold_id();
    const auto res = reserve(*decode.engine, hold, tokens);
    n_cached = res.n_cached;
    EXPECT_TRUE(decode.rx->expect(id, {res.blocks.begin() + res.n_cached, res.blocks.end()}).ok());
    const disagg::PrefillRequest r{.transfer_id = id,
                                   .tokens = tokens,
                                   .skip_blocks = res.n_cached,
                                   .kv_format = decode.engine->runner().kv_format(),
                                   .target_host = "127.0.0.1",
                                   .target_port = decode.node->port(),
                                   .timeout = 20s};
    auto out = (*pusher)->push(r);
    EXPECT_TRUE(out.ok()) << out.error();
    std::string why;
    EXPECT_EQ(decode.rx->wait(id, std::chrono::steady_clock::now() + 20s, &why), disagg::TransferEnd::done) << why;
    decode.engine->call([&](engine::EngineCore& c) {
      EXPECT_TRUE(c.commit_kv(hold, tokens).ok());
      c.release_kv(hold);
    });
    return out.ok() ? *out : disagg::PrefillResult{};
  };
  const disagg::PrefillResult first = pull(prompt, 11);
  EXPECT_EQ(n_cached, 0);
  EXPECT_EQ(first.n_blocks, int32_t(prompt.size() / 16));
  EXPECT_GE(first.n_pieces, 2);  // the first chunk's blocks went before the second chunk ended
  EXPECT_GT(first.transfer_ms, 0.0);
  EXPECT_GT(first.bytes, 0);
  EXPECT_EQ(run(*decode.engine, greedy(prompt, 16)).tokens, run(*alone, greedy(prompt, 16)).tokens);

  const disagg::PrefillResult second = pull(longer, 12);
  EXPECT_GE(n_cached, int32_t(prompt.size() / 16));
  EXPECT_EQ(second.n_blocks, int32_t(longer.size() / 16) - n_cached);
  EXPECT_GT(second.n_blocks, 0);
  const engine::Delta got = run(*decode.engine, greedy(longer, 8));
  EXPECT_EQ(got.tokens, run(*alone, greedy(longer, 8)).tokens);
  EXPECT_EQ(got.usage.cached_tokens, int32_t((longer.size() - 1) / 16 * 16));
  const disagg::PushCounters c = (*pusher)->counters();
  EXPECT_EQ(c.done, 2);
  EXPECT_EQ(c.failed, 0);
  EXPECT_EQ(blocks_used(*prefill), 0);
  EXPECT_EQ(blocks_used(*decode.engine), 0);
}
