// The thread pool behind parallel_for (core/parallel.h).
#include "core/parallel.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
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

class Pool {
 public:
  explicit Pool(int size) : size_(size) {
    for (int w = 1; w < size_; ++w) threads_.emplace_back([this, w] { serve(w); });
  }
  int size() const { return size_; }

  // False when another thread's call holds the pool; the caller then runs inline.
  bool try_run(int64_t count, detail::ItemFn fn, void* body) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    const int workers = int(std::min<int64_t>(size_, count));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = fn;
      body_ = body;
      count_ = count;
      next_ = 0;
      workers_ = workers;
      pending_ = workers - 1;
      error_ = nullptr;
      ++generation_;
    }
    if (workers > 1) wake_.notify_all();
    in_parallel_region = true;
    drain(0);
    in_parallel_region = false;
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  void drain(int worker) {
    try {
      for (int64_t item = next_++; item < count_; item = next_++) fn_(body_, item, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      next_ = count_;
    }
  }

  void serve(int worker) {
    in_parallel_region = true;  // a pool thread never waits on its own pool
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (worker >= workers_) continue;
      lock.unlock();
      drain(worker);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  const int size_;
  std::vector<std::thread> threads_;
  std::mutex busy_;   // one parallel_for on the pool at a time
  std::mutex mutex_;  // guards the job's fields below and the wake-ups
  std::condition_variable wake_, done_;
  uint64_t generation_ = 0;
  detail::ItemFn fn_ = nullptr;
  void* body_ = nullptr;
  int64_t count_ = 0;
  std::atomic<int64_t> next_{0};
  int workers_ = 0, pending_ = 0;
  std::exception_ptr error_;
};

// Created at the first parallel_for and never destroyed: its threads sleep on
// a condition variable until the process exits, so no exit-time join can race
// a static destructor or a late call.
Pool& pool() {
  static Pool* const p = new Pool(configured_threads());
  return *p;
}

}  // namespace

int thread_count() { return pool().size(); }

int worker_count(int64_t items) {
  return int(std::min<int64_t>(thread_count(), std::max<int64_t>(items, 1)));
}

namespace detail {

void run_parallel(int64_t count, ItemFn fn, void* body) {
  if (count <= 0) return;
  if (count > 1 && !in_parallel_region && pool().size() > 1 && pool().try_run(count, fn, body))
    return;
  // Inline, as worker 0: one item, a nested call, or the pool busy with another caller.
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
