// Replaces all global operator new/delete forms (C++17: plain, array, nothrow,
// aligned, sized) with malloc-based versions that count bytes. glibc-specific:
// malloc_usable_size gives each block's size on delete.
#include "heap_tracker.h"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace flashattn::cli::heap {
namespace {

constinit std::atomic<size_t> g_current{0};
constinit std::atomic<size_t> g_peak{0};

void record(size_t bytes) {
  const size_t now = g_current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  size_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// nullptr once the new-handler (if any) gives up, as operator new's contract asks.
void* allocate(size_t bytes, size_t alignment) {
  if (bytes == 0) bytes = 1;
  for (;;) {
    void* ptr = alignment <= alignof(std::max_align_t)
                    ? std::malloc(bytes)
                    : std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
    if (ptr) {
      record(malloc_usable_size(ptr));
      return ptr;
    }
    const std::new_handler handler = std::get_new_handler();
    if (!handler) return nullptr;
    handler();
  }
}

void* allocate_or_throw(size_t bytes, size_t alignment) {
  void* ptr = allocate(bytes, alignment);
  if (!ptr) throw std::bad_alloc();
  return ptr;
}

void* allocate_or_null(size_t bytes, size_t alignment) noexcept {
  try {
    return allocate(bytes, alignment);
  } catch (const std::bad_alloc&) {  // thrown by a new-handler
    return nullptr;
  }
}

void release(void* ptr) noexcept {
  if (!ptr) return;
  g_current.fetch_sub(malloc_usable_size(ptr), std::memory_order_relaxed);
  std::free(ptr);
}

constexpr size_t kDefault = alignof(std::max_align_t);

}  // namespace

size_t current_bytes() { return g_current.load(std::memory_order_relaxed); }
size_t peak_bytes() { return g_peak.load(std::memory_order_relaxed); }
void reset_peak() { g_peak.store(g_current.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace flashattn::cli::heap

using flashattn::cli::heap::allocate_or_null;
using flashattn::cli::heap::allocate_or_throw;
using flashattn::cli::heap::kDefault;
using flashattn::cli::heap::release;

void* operator new(size_t n) { return allocate_or_throw(n, kDefault); }
void* operator new[](size_t n) { return allocate_or_throw(n, kDefault); }
void* operator new(size_t n, std::align_val_t a) { return allocate_or_throw(n, size_t(a)); }
void* operator new[](size_t n, std::align_val_t a) { return allocate_or_throw(n, size_t(a)); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return allocate_or_null(n, kDefault); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return allocate_or_null(n, kDefault); }
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_or_null(n, size_t(a));
}
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return allocate_or_null(n, size_t(a));
}

void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, size_t) noexcept { release(p); }
void operator delete[](void* p, size_t) noexcept { release(p); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }
