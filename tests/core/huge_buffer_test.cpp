#include "core/huge_buffer.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <utility>
#include <vector>

using namespace kvasir;

// The KV cache relies on these: zeroed on creation, every byte writable, ownership moves.
TEST(HugeBuffer, ZeroedWritableAndMovable) {
  const size_t bytes = (size_t(5) << 20) + 123;  // not a whole number of huge pages
  HugeBuffer a(bytes);
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.size(), bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 4096, 0u);
  uint64_t nonzero = 0;
  for (size_t i = 0; i < bytes; i += 509) nonzero += a.data()[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  for (size_t i = 0; i < bytes; ++i) a.data()[i] = uint8_t(i * 7);
  HugeBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  ASSERT_EQ(b.size(), bytes);
  EXPECT_EQ(b.data()[bytes - 1], uint8_t((bytes - 1) * 7));
  HugeBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data()[4242], uint8_t(4242 * 7));
  EXPECT_EQ(HugeBuffer(0).data(), nullptr);
}

TEST(HugeBuffer, ImpossibleSizeIsNullNotACrash) {
  HugeBuffer huge(size_t(1) << 62);
  EXPECT_EQ(huge.data(), nullptr);
  EXPECT_EQ(huge.size(), 0u);
}

// populate() commits every page up front (the KV pool is populated at start-up so that no
// request pays page faults) and leaves the contents zero.
TEST(HugeBuffer, PopulateCommitsEveryPageAndKeepsZeros) {
  const size_t bytes = (size_t(3) << 20) + 4096 * 3 + 17;
  HugeBuffer a(bytes);
  ASSERT_NE(a.data(), nullptr);
  const size_t page = size_t(sysconf(_SC_PAGESIZE)), pages = (bytes + page - 1) / page;
  std::vector<unsigned char> resident(pages);
  a.populate();
  ASSERT_EQ(mincore(a.data(), bytes, resident.data()), 0);
  size_t missing = 0;
  for (unsigned char r : resident) missing += (r & 1) == 0;
  EXPECT_EQ(missing, 0u) << "of " << pages << " pages";
  uint64_t nonzero = 0;
  for (size_t i = 0; i < bytes; ++i) nonzero += a.data()[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  HugeBuffer none;
  none.populate();  // nothing mapped: a no-op
  EXPECT_EQ(none.data(), nullptr);
}

// populate_in_background() commits every page while the owner writes: what was written stays
// (the kernel populates without writing), every page ends resident, the buffer moves with its
// filler, and one destroyed mid-way stops it at once.
TEST(HugeBuffer, BackgroundPopulateKeepsWritesAndCommitsEveryPage) {
  const size_t bytes = (size_t(96) << 20) + 4096 + 5;
  HugeBuffer a(bytes);
  ASSERT_NE(a.data(), nullptr);
  a.populate_in_background();
  for (size_t i = 0; i < bytes; i += 4093) a.data()[i] = uint8_t(1 + i % 251);  // meanwhile
  HugeBuffer b(std::move(a));
  const size_t page = size_t(sysconf(_SC_PAGESIZE)), pages = (bytes + page - 1) / page;
  std::vector<unsigned char> resident(pages);
  size_t missing = pages;
  for (int tries = 0; tries < 500 && missing > 0; ++tries) {
    ASSERT_EQ(mincore(b.data(), bytes, resident.data()), 0);
    missing = 0;
    for (unsigned char r : resident) missing += (r & 1) == 0;
    if (missing) usleep(10000);
  }
  EXPECT_EQ(missing, 0u) << "of " << pages << " pages";
  size_t wrong = 0;
  for (size_t i = 0; i < bytes; ++i) wrong += b.data()[i] != (i % 4093 == 0 ? uint8_t(1 + i % 251) : 0);
  EXPECT_EQ(wrong, 0u);
  {
    HugeBuffer gone(size_t(512) << 20);
    gone.populate_in_background();
  }  // stopped and joined here, within a chunk
}
