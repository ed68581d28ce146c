// Send buffers come back for reuse when the transport lets go of them.
#include <gtest/gtest.h>

#include "disagg/kv_transfer.h"

namespace kvasir::disagg {
namespace {

TEST(SendBuffers, ReusedOnceReleased) {
  SendBuffers pool;
  const uint8_t* first;
  {
    auto a = pool.take(1 << 20);
    ASSERT_EQ(a->size(), size_t(1) << 20);
    first = a->data();
    auto b = pool.take(1 << 20);  // a is still held: another buffer
    EXPECT_NE(b->data(), first);
  }
  auto c = pool.take(1000);  // smaller fits a spare one
  EXPECT_EQ(c->size(), 1000u);
  auto d = pool.take(1 << 20);
  EXPECT_TRUE(c->data() == first || d->data() == first);
}

}  // namespace
}  // namespace kvasir::disagg
