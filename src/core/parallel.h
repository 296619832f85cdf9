// parallel_for over [0, count): the CPU backends' only threading primitive.
// Items are handed out one at a time from an atomic counter, so uneven items
// (causal rows) balance across threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace flashattn {

inline int worker_count(int64_t items) {
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  return int(std::min<int64_t>(hw, std::max<int64_t>(items, 1)));
}

// Runs body(item, worker) for every item; worker is in [0, worker_count(count)).
template <typename Body>
void parallel_for(int64_t count, Body&& body) {
  const int workers = worker_count(count);
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto loop = [&](int worker) {
    try {
      for (int64_t item = next++; item < count; item = next++) body(item, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      next = count;
    }
  };
  std::vector<std::thread> threads;
  for (int w = 1; w < workers; ++w) threads.emplace_back(loop, w);
  loop(0);
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace flashattn
