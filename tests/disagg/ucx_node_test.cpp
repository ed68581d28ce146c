// Two UCX nodes on loopback: messages arrive whole (small ones eager, large ones by rendezvous),
// a connection to nothing fails within its timeout, and a peer that goes away is reported.
#include "disagg/ucx_node.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

using namespace kvasir::disagg;
using namespace std::chrono_literals;

namespace {

struct Inbox {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::pair<std::vector<uint8_t>, std::vector<uint8_t>>> messages;
  std::vector<PeerId> down;
  UcxCallbacks callbacks() {
    return {.on_message =
                [this](PeerId, std::span<const uint8_t> h, std::span<const uint8_t> p) {
                  std::lock_guard<std::mutex> l(mutex);
                  messages.push_back({{h.begin(), h.end()}, {p.begin(), p.end()}});
                  cv.notify_all();
                },
            .on_peer_down =
                [this](PeerId peer, const std::string&) {
                  std::lock_guard<std::mutex> l(mutex);
                  down.push_back(peer);
                  cv.notify_all();
                }};
  }
  template <typename P>
  bool wait(P pred) {
    std::unique_lock<std::mutex> l(mutex);
    return cv.wait_for(l, 10s, pred);
  }
};

// Sends `bytes` and waits up to 5 s for the outcome (none: still pending then).
std::optional<kvasir::Status> send_and_wait(UcxNode& node, PeerId peer, size_t bytes) {
  struct Shared {
    std::mutex m;
    std::condition_variable cv;
    std::optional<kvasir::Status> status;
  };
  auto sh = std::make_shared<Shared>();
  node.send(peer, {1}, std::make_shared<std::vector<uint8_t>>(bytes), [sh](kvasir::Status s) {
    std::lock_guard<std::mutex> l(sh->m);
    sh->status = s;
    sh->cv.notify_all();
  });
  std::unique_lock<std::mutex> l(sh->m);
  sh->cv.wait_for(l, 5s, [&] { return sh->status.has_value(); });
  return sh->status;
}

}  // namespace

TEST(UcxNode, MessagesArriveWhole) {
  Inbox in;
  auto server = UcxNode::create({.listen_host = "127.0.0.1"}, in.callbacks());
  ASSERT_TRUE(server.ok()) << server.error();
  ASSERT_GT((*server)->port(), 0);
  Inbox unused;
  auto client = UcxNode::create({}, unused.callbacks());
  ASSERT_TRUE(client.ok()) << client.error();
  auto peer = (*client)->connect("127.0.0.1", (*server)->port(), 5s);
  ASSERT_TRUE(peer.ok()) << peer.error();
  std::mutex m;
  int sent_ok = 0;
  for (size_t n : {size_t(0), size_t(100), size_t(8) << 20}) {  // nothing, eager, rendezvous
    auto payload = std::make_shared<std::vector<uint8_t>>(n);
    for (size_t i = 0; i < n; ++i) (*payload)[i] = uint8_t(i * 31 + n);
    (*client)->send(*peer, {uint8_t(n & 0xff), 2, 3}, payload, [&](kvasir::Status s) {
      std::lock_guard<std::mutex> l(m);
      sent_ok += s.ok();
    });
  }
  ASSERT_TRUE(in.wait([&] { return in.messages.size() == 3; }));
  for (const auto& [h, p] : in.messages) {
    ASSERT_EQ(h.size(), 3u);
    const size_t n = p.size();
    EXPECT_EQ(h[0], uint8_t(n & 0xff));
    for (size_t i = 0; i < n; ++i)
      if (p[i] != uint8_t(i * 31 + n)) FAIL() << "byte " << i << " of " << n;
  }
  std::this_thread::sleep_for(50ms);
  std::lock_guard<std::mutex> l(m);
  EXPECT_EQ(sent_ok, 3);
}

TEST(UcxNode, ConnectingToNothingFailsInTime) {
  Inbox in;
  auto client = UcxNode::create({}, in.callbacks());
  ASSERT_TRUE(client.ok()) << client.error();
  // A port nobody listens on: refused, or at worst the timeout.
  auto probe = UcxNode::create({.listen_host = "127.0.0.1"}, in.callbacks());
  ASSERT_TRUE(probe.ok());
  const uint16_t port = (*probe)->port();
  probe->reset();
  const auto t0 = std::chrono::steady_clock::now();
  auto peer = (*client)->connect("127.0.0.1", port, 2s);
  EXPECT_FALSE(peer.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  auto sent = send_and_wait(**client, 12345, 1);
  ASSERT_TRUE(sent.has_value());
  EXPECT_FALSE(sent->ok());  // an unknown peer is an error, not a hang
}

TEST(UcxNode, APeerThatGoesAwayIsReported) {
  Inbox server_in, client_in;
  auto server = UcxNode::create({.listen_host = "127.0.0.1"}, server_in.callbacks());
  ASSERT_TRUE(server.ok());
  auto client = UcxNode::create({}, client_in.callbacks());
  ASSERT_TRUE(client.ok());
  auto peer = (*client)->connect("127.0.0.1", (*server)->port(), 5s);
  ASSERT_TRUE(peer.ok()) << peer.error();
  (*client)->send(*peer, {1}, nullptr, {});
  ASSERT_TRUE(server_in.wait([&] { return !server_in.messages.empty(); }));
  server->reset();  // the server process "dies"
  // The client learns of it when it next uses the connection, at the latest.
  bool failed = false;
  for (int i = 0; i < 100 && !failed; ++i) {
    auto st = send_and_wait(**client, *peer, 1 << 16);
    failed = !st || !st->ok();
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(failed);
  EXPECT_TRUE(client_in.wait([&] { return !client_in.down.empty(); }));
}
