// parallel_for over [0, count): the CPU backends' only threading primitive. It
// runs on one pool of threads created at the first call and kept for the
// process, so a call costs a wake-up, not a thread start per worker. Items are
// handed out one at a time from an atomic counter, so uneven items (causal
// rows) balance across threads; only the workers a call uses are woken. The
// pool has one thread per CPU the process may run on (its affinity mask), or
// FLASHATTN_NUM_THREADS if set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace flashattn {

// The most workers a parallel_for of the calling thread uses now: the pool's
// size, or less under a WorkerCap.
int thread_count();

// The workers a parallel_for over `items` uses: min(thread_count(), items), at least 1.
int worker_count(int64_t items);

// While it lives, the calling thread's parallel_for calls wake at most `most`
// workers (at least 1: the caller alone). For a call whose work is too short
// to repay waking the whole pool; kernels that size their items by
// thread_count() then size them for the cap.
class WorkerCap {
 public:
  explicit WorkerCap(int most);
  ~WorkerCap();
  WorkerCap(const WorkerCap&) = delete;
  WorkerCap& operator=(const WorkerCap&) = delete;

 private:
  int outer_;
};

// Chunks to cut each of `slices` slices' `rows` rows into, for a sum over the
// rows (a backward's dk and dv over query rows) whose chunks each keep partial
// sums of `partial_bytes` and are then added in chunk order. Enough chunks for
// a pool's threads where the slices are few (one sequence, one kv head), at
// least 256 rows each, and at most 256 MiB of partial sums in all; 1 where
// the slices alone are enough. A function of the problem, not of the thread
// count, so the sums' bits are the same on every machine.
int64_t row_chunks(int64_t slices, int64_t rows, int64_t partial_bytes);

namespace detail {
using ItemFn = void (*)(void* body, int64_t item, int worker);
// Runs fn(body, item, worker) for every item on the pool; the caller is worker
// 0. The first exception thrown stops the hand-out and is rethrown here. A call
// made from inside a pool task (or while another thread's call runs) runs its
// items on the calling thread alone, as worker 0.
void run_parallel(int64_t count, ItemFn fn, void* body);
}  // namespace detail

// Runs body(item, worker) for every item; worker is in [0, worker_count(count)).
template <typename Body>
void parallel_for(int64_t count, Body&& body) {
  using B = std::remove_reference_t<Body>;
  detail::run_parallel(
      count, [](void* b, int64_t item, int worker) { (*static_cast<B*>(b))(item, worker); },
      const_cast<void*>(static_cast<const void*>(&body)));
}

// A sum over the rows of `slices` slices into per-key values (a backward's dk
// and dv), split by row_chunks: part(slice, row_begin, row_end, sums) adds the
// rows' terms into a fresh Sums of its own, then finish(slice, key, parts,
// count) makes key `key` of the slice from its chunks' Sums, parts[0] to
// parts[count - 1], in chunk order. Where a slice is one chunk, the slice is
// finished as soon as its chunk is done and the Sums freed, so its memory is
// that of the threads at work.
template <typename Sums, typename Part, typename Finish>
void sum_over_row_chunks(int64_t slices, int64_t rows, int64_t keys, int64_t sums_bytes,
                         Part&& part, Finish&& finish) {
  const int64_t chunks = row_chunks(slices, rows, sums_bytes);
  std::vector<Sums> sums(std::size_t(slices * chunks));
  parallel_for(slices * chunks, [&](int64_t item, int) {
    const int64_t slice = item / chunks, chunk = item % chunks;
    Sums& own = sums[std::size_t(item)];
    part(slice, rows * chunk / chunks, rows * (chunk + 1) / chunks, own);
    if (chunks > 1) return;
    for (int64_t key = 0; key < keys; ++key) finish(slice, key, &own, chunks);
    own = Sums{};
  });
  if (chunks == 1) return;
  parallel_for(slices * keys, [&](int64_t item, int) {
    const int64_t slice = item / keys;
    finish(slice, item % keys, &sums[std::size_t(slice * chunks)], chunks);
  });
}

// In a finish of sum_over_row_chunks: element `at` of the chunks' `member`
// (parts[0] to parts[count - 1]) added in chunk order.
template <typename Sums, typename Values>
auto chunk_total(const Sums* parts, int64_t count, Values Sums::*member, std::size_t at) {
  auto total = (parts[0].*member)[at];
  for (int64_t chunk = 1; chunk < count; ++chunk) total += (parts[chunk].*member)[at];
  return total;
}

}  // namespace flashattn
