#include "core/huge_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <utility>

namespace kvasir {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kPage = size_t(4) << 10;
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif
}  // namespace

HugeBuffer::HugeBuffer(size_t bytes) {
  if (bytes == 0 || bytes > SIZE_MAX - kHugePage) return;
  // Whole huge pages, so that the tail of the buffer is eligible too.
  const size_t mapped = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
#ifdef MADV_HUGEPAGE
  (void)::madvise(p, mapped, MADV_HUGEPAGE);  // a hint: refused means 4 KiB pages, same bytes
#endif
  data_ = static_cast<uint8_t*>(p);
  size_ = bytes;
  mapped_ = mapped;
}

void HugeBuffer::populate() {
  if (!data_) return;
  if (::madvise(data_, mapped_, MADV_POPULATE_WRITE) == 0 || errno != EINVAL) return;  // out of memory: stay lazy
  // Kernels before 5.14: write the zero each page already reads as (nothing uses the buffer yet).
  for (size_t off = 0; off < mapped_; off += kPage) reinterpret_cast<volatile uint8_t*>(data_)[off] = 0;
}

HugeBuffer::~HugeBuffer() { release(); }

HugeBuffer::HugeBuffer(HugeBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), mapped_(std::exchange(o.mapped_, 0)) {}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    mapped_ = std::exchange(o.mapped_, 0);
  }
  return *this;
}

void HugeBuffer::release() {
  if (data_) ::munmap(data_, mapped_);
  data_ = nullptr;
  size_ = mapped_ = 0;
}

}  // namespace kvasir
