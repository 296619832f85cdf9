// The thread pool behind parallel_for (core/parallel.h).
#include "core/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

namespace flashattn {
namespace {

int configured_threads() {
  if (const char* env = std::getenv("FLASHATTN_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

// True on the pool's threads and on a caller while its items run: a nested
// parallel_for then runs inline instead of waiting on itself.
thread_local bool in_parallel_region = false;

// The calling thread's WorkerCap: the most workers its parallel_for calls use.
thread_local int worker_cap = std::numeric_limits<int>::max();

class Pool {
 public:
  explicit Pool(int size) : size_(size), wake_(size_t(size)) {
    for (int w = 1; w < size_; ++w) threads_.emplace_back([this, w] { serve(w); });
  }
  int size() const { return size_; }

  // False when another thread's call holds the pool; the caller then runs inline.
  // Wakes only the workers the job uses, each on its own word: waking them all
  // through one condition variable made each woken thread take the same mutex in
  // turn, so a job's start waited on the whole pool (see docs/perf/cpu.md).
  bool try_run(int64_t count, int workers, detail::ItemFn fn, void* body) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    fn_ = fn;
    body_ = body;
    count_ = count;
    next_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    pending_.store(workers - 1, std::memory_order_relaxed);
    for (int w = 1; w < workers; ++w) {
      wake_[size_t(w)].jobs.fetch_add(1, std::memory_order_release);
      wake_[size_t(w)].jobs.notify_one();
    }
    in_parallel_region = true;
    drain(0);
    in_parallel_region = false;
    for (int left = pending_.load(std::memory_order_acquire); left != 0;
         left = pending_.load(std::memory_order_acquire))
      pending_.wait(left, std::memory_order_acquire);
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  void drain(int worker) {
    try {
      for (int64_t item = next_++; item < count_; item = next_++) fn_(body_, item, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
      next_ = count_;
    }
  }

  void serve(int worker) {
    in_parallel_region = true;  // a pool thread never waits on its own pool
    std::atomic<uint32_t>& jobs = wake_[size_t(worker)].jobs;
    uint32_t seen = 0;
    for (;;) {
      jobs.wait(seen, std::memory_order_acquire);
      seen = jobs.load(std::memory_order_acquire);
      drain(worker);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
    }
  }

  // A worker's wake-up word, on its own cache line: how many jobs it has been
  // given. A job waits for the workers it woke, so the word moves on only after
  // its worker has finished the last one, and no job is missed.
  struct alignas(64) WakeWord {
    std::atomic<uint32_t> jobs{0};
  };

  const int size_;
  std::vector<WakeWord> wake_;  // by worker; [0] (the caller) unused
  std::vector<std::thread> threads_;
  std::mutex busy_;  // one parallel_for on the pool at a time
  // The job, written by its caller before the workers' wake-up words and read
  // by them after.
  detail::ItemFn fn_ = nullptr;
  void* body_ = nullptr;
  int64_t count_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int> pending_{0};  // woken workers not yet done with the job
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// Created at the first parallel_for and never destroyed: its threads sleep on
// their wake-up words until the process exits, so no exit-time join can race
// a static destructor or a late call.
Pool& pool() {
  static Pool* const p = new Pool(configured_threads());
  return *p;
}

}  // namespace

int thread_count() { return std::min(pool().size(), worker_cap); }

WorkerCap::WorkerCap(int most) : outer_(worker_cap) {
  worker_cap = std::max(1, std::min(outer_, most));
}
WorkerCap::~WorkerCap() { worker_cap = outer_; }

int worker_count(int64_t items) {
  return int(std::min<int64_t>(thread_count(), std::max<int64_t>(items, 1)));
}

int64_t row_chunks(int64_t slices, int64_t rows, int64_t partial_bytes) {
  constexpr int64_t kItems = 64;  // 4 per thread of a 16-thread pool: causal chunks are uneven
  constexpr int64_t kMinRows = 256;  // a chunk's sums cost about one row's work to zero and add
  constexpr int64_t kPartialBudget = int64_t(256) << 20;
  if (slices <= 0 || slices >= kItems) return 1;
  const int64_t wanted = (kItems + slices - 1) / slices;
  const int64_t by_rows = std::max<int64_t>(1, rows / kMinRows);
  const int64_t by_memory =
      std::max<int64_t>(1, kPartialBudget / std::max<int64_t>(1, slices * partial_bytes));
  return std::min({wanted, by_rows, by_memory});
}

namespace detail {

void run_parallel(int64_t count, ItemFn fn, void* body) {
  if (count <= 0) return;
  const int workers = worker_count(count);
  if (workers > 1 && !in_parallel_region && pool().try_run(count, workers, fn, body)) return;
  // Inline, as worker 0: one worker (one item, or a cap of 1), a nested call,
  // or the pool busy with another caller.
  const bool outer = in_parallel_region;
  in_parallel_region = true;
  try {
    for (int64_t item = 0; item < count; ++item) fn(body, item, 0);
  } catch (...) {
    in_parallel_region = outer;
    throw;
  }
  in_parallel_region = outer;
}

}  // namespace detail
}  // namespace flashattn
