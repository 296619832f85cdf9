// A grow-only buffer of floats on 64-byte boundaries (a cache line, an AVX-512
// register): the CPU kernels' per-thread tiles, kept between calls.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace flashattn::cpu {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer() { std::free(data_); }

  // At least `count` floats; the contents are unspecified after a growth.
  float* reserve(size_t count) {
    if (count > capacity_) {
      std::free(data_);
      const size_t bytes = (count * sizeof(float) + 63) / 64 * 64;
      data_ = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (!data_) throw std::bad_alloc();
      capacity_ = bytes / sizeof(float);
    }
    return data_;
  }

 private:
  float* data_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace flashattn::cpu
