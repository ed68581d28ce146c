// The KV frame header: what encode writes, parse reads back; every malformed header is an error.
#include "disagg/transfer_frame.h"

#include <gtest/gtest.h>

using namespace kvasir::disagg;

TEST(TransferFrame, RoundTrips) {
  const Frame f{.kind = FrameKind::blocks, .transfer_id = 0x1122334455667788ull, .layer = 17, .first = 5,
                .n_blocks = 3, .block_bytes = 1024, .format_hash = 42};
  auto h = encode_header(f);
  ASSERT_EQ(h.size(), kFrameHeaderBytes);
  auto p = parse_header(h, 3 * 1024);
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_EQ(p->transfer_id, f.transfer_id);
  EXPECT_EQ(p->layer, 17u);
  EXPECT_EQ(p->first, 5u);
  EXPECT_EQ(p->n_blocks, 3u);
  EXPECT_EQ(p->block_bytes, 1024u);
  EXPECT_EQ(p->format_hash, 42u);
  auto done = parse_header(encode_header({.kind = FrameKind::done, .transfer_id = 9, .n_blocks = 4}), 0);
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->kind, FrameKind::done);
}

TEST(TransferFrame, RejectsMalformedHeaders) {
  const Frame f{.kind = FrameKind::blocks, .transfer_id = 1, .n_blocks = 2, .block_bytes = 8};
  const auto good = encode_header(f);
  EXPECT_FALSE(parse_header(std::span(good).first(39), 16).ok());  // short
  EXPECT_FALSE(parse_header(good, 15).ok());                        // payload does not match the blocks
  EXPECT_FALSE(parse_header(good, 17).ok());
  auto bad = good;
  bad[0] ^= 1;  // magic
  EXPECT_FALSE(parse_header(bad, 16).ok());
  bad = good;
  bad[4] = 9;  // kind
  EXPECT_FALSE(parse_header(bad, 16).ok());
  bad = good;
  bad[6] = 1;  // reserved
  EXPECT_FALSE(parse_header(bad, 16).ok());
  EXPECT_FALSE(parse_header(encode_header({.kind = FrameKind::blocks, .n_blocks = 0, .block_bytes = 8}), 0).ok());
  EXPECT_FALSE(parse_header(encode_header({.kind = FrameKind::blocks, .first = kMaxFrameBlocks, .n_blocks = 1,
                                           .block_bytes = 8}),
                            8)
                   .ok());
  EXPECT_FALSE(parse_header(encode_header({.kind = FrameKind::done}), 1).ok());  // control frames carry nothing
  EXPECT_TRUE(parse_header(good, 16).ok());
}
