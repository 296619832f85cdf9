// The CPU backends' thread pool (core/parallel.h): every item runs once, on a
// worker index in range; many jobs of a few short items back to back; an
// exception reaches the caller and the pool runs the next job; nested calls
// run inline; two callers at once; long items spread over the threads; a
// WorkerCap; sums over chunks of rows, the same bits whatever the threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/parallel.h"

namespace flashattn {
namespace {

TEST(Parallel, EveryItemRunsOnceOnAWorkerInRange) {
  for (int64_t count : {1, 2, 3, 17, 1000}) {
    std::vector<std::atomic<int>> runs(static_cast<size_t>(count));
    std::atomic<bool> worker_in_range{true};
    const int workers = worker_count(count);
    parallel_for(count, [&](int64_t item, int worker) {
      runs[size_t(item)]++;
      if (worker < 0 || worker >= workers) worker_in_range = false;
    });
    for (int64_t item = 0; item < count; ++item) EXPECT_EQ(runs[size_t(item)], 1) << item;
    EXPECT_TRUE(worker_in_range) << count;
  }
}

TEST(Parallel, ManyJobsOfFewShortItemsBackToBack) {
  int64_t expected = 0;
  std::atomic<int64_t> sum{0};
  for (int job = 0; job < 5000; ++job) {
    const int64_t count = 2 + job % 3;
    parallel_for(count, [&](int64_t item, int) { sum += item + job; });
    expected += count * (count - 1) / 2 + count * job;
    ASSERT_EQ(sum.load(), expected) << job;
  }
}

TEST(Parallel, AnExceptionReachesTheCallerAndThePoolRunsOn) {
  std::atomic<int> ran{0};
  EXPECT_THROW(parallel_for(64,
                            [&](int64_t item, int) {
                              ++ran;
                              if (item == 5) throw std::runtime_error("item 5");
                            }),
               std::runtime_error);
  EXPECT_LE(ran.load(), 64);
  std::atomic<int> after{0};
  parallel_for(64, [&](int64_t, int) { ++after; });
  EXPECT_EQ(after.load(), 64);
}

TEST(Parallel, NestedCallsRunInlineOnTheirCaller) {
  std::atomic<int> inner{0};
  std::atomic<bool> inner_on_worker_0{true};
  parallel_for(8, [&](int64_t, int) {
    parallel_for(5, [&](int64_t, int worker) {
      ++inner;
      if (worker != 0) inner_on_worker_0 = false;
    });
  });
  EXPECT_EQ(inner.load(), 40);
  EXPECT_TRUE(inner_on_worker_0);
}

TEST(Parallel, TwoCallersAtOnceBothFinish) {
  std::atomic<int64_t> sums[2] = {0, 0};
  auto caller = [&](int c) {
    for (int job = 0; job < 2000; ++job)
      parallel_for(7, [&](int64_t item, int) { sums[c] += item; });
  };
  std::thread other(caller, 1);
  caller(0);
  other.join();
  EXPECT_EQ(sums[0].load(), 2000 * 21);
  EXPECT_EQ(sums[1].load(), 2000 * 21);
}

TEST(Parallel, LongItemsSpreadOverTheThreads) {
  if (thread_count() < 2) GTEST_SKIP() << "one thread";
  std::vector<std::atomic<int>> by_worker(static_cast<size_t>(thread_count()));
  parallel_for(4 * thread_count(), [&](int64_t, int worker) {
    by_worker[size_t(worker)]++;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  });
  int used = 0;
  for (const auto& n : by_worker) used += n > 0;
  EXPECT_GE(used, 2);
}

TEST(Parallel, AWorkerCapLimitsTheWorkersWhileItLives) {
  const int pool = thread_count();
  {
    const WorkerCap cap(2);
    EXPECT_EQ(thread_count(), std::min(pool, 2));
    std::atomic<bool> in_range{true};
    std::atomic<int> ran{0};
    parallel_for(64, [&](int64_t, int worker) {
      ++ran;
      if (worker >= 2) in_range = false;
    });
    EXPECT_EQ(ran.load(), 64);
    EXPECT_TRUE(in_range);
    {
      const WorkerCap wider(8);  // a nested cap narrows, never widens
      EXPECT_EQ(thread_count(), std::min(pool, 2));
      const WorkerCap alone(0);  // at least the caller
      EXPECT_EQ(thread_count(), 1);
      std::atomic<bool> on_caller{true};
      parallel_for(16, [&](int64_t, int worker) {
        if (worker != 0) on_caller = false;
      });
      EXPECT_TRUE(on_caller);
    }
    EXPECT_EQ(thread_count(), std::min(pool, 2));
  }
  EXPECT_EQ(thread_count(), pool);
}

TEST(Parallel, AWorkerCapHoldsOnItsOwnThreadOnly) {
  const int pool = thread_count();
  const WorkerCap cap(1);
  int other_threads = 0;
  std::thread other([&] { other_threads = thread_count(); });
  other.join();
  EXPECT_EQ(other_threads, pool);
}

TEST(RowChunks, SplitOnlyFewSlicesIntoChunksOfManyRowsWithinTheMemoryCap) {
  EXPECT_EQ(row_chunks(64, 100000, 1), 1);    // slices enough on their own
  EXPECT_EQ(row_chunks(1, 100000, 1), 64);    // one slice: 64 chunks
  EXPECT_EQ(row_chunks(4, 100000, 1), 16);
  EXPECT_EQ(row_chunks(1, 1000, 1), 3);       // at least 256 rows a chunk
  EXPECT_EQ(row_chunks(1, 200, 1), 1);
  EXPECT_EQ(row_chunks(2, 100000, int64_t(64) << 20), 2);  // 256 MiB of sums at most
  EXPECT_EQ(row_chunks(1, 100000, int64_t(1) << 30), 1);
  EXPECT_EQ(row_chunks(0, 0, 0), 1);
}

// Per key, the sum over rows of row·(key + 1) / 3 in float, whose bits depend
// on the order of the additions: the chunked sum gives the same bits on one
// thread and on all, and matches the exact sum to float's rounding.
TEST(RowChunks, SumsAreTheSameBitsOnOneThreadAndOnAll) {
  struct Sums {
    std::vector<float> per_key;
  };
  constexpr int64_t kSlices = 2, kRows = 5000, kKeys = 7;
  const auto run = [&] {
    std::vector<float> out(size_t(kSlices * kKeys));
    sum_over_row_chunks<Sums>(
        kSlices, kRows, kKeys, kKeys * int64_t(sizeof(float)),
        [&](int64_t slice, int64_t begin, int64_t end, Sums& sums) {
          sums.per_key.assign(size_t(kKeys), 0.0f);
          for (int64_t row = begin; row < end; ++row)
            for (int64_t key = 0; key < kKeys; ++key)
              sums.per_key[size_t(key)] += float(row + slice) * float(key + 1) / 3.0f;
        },
        [&](int64_t slice, int64_t key, const Sums* parts, int64_t count) {
          float total = parts[0].per_key[size_t(key)];
          for (int64_t c = 1; c < count; ++c) total += parts[c].per_key[size_t(key)];
          out[size_t(slice * kKeys + key)] = total;
        });
    return out;
  };
  const std::vector<float> all = run();
  std::vector<float> one;
  {
    const WorkerCap cap(1);
    one = run();
  }
  EXPECT_EQ(all, one);
  for (int64_t slice = 0; slice < kSlices; ++slice)
    for (int64_t key = 0; key < kKeys; ++key) {
      const double exact = (kRows * (kRows - 1) / 2.0 + double(slice) * kRows) * (key + 1) / 3.0;
      EXPECT_NEAR(all[size_t(slice * kKeys + key)], exact, 1e-5 * exact) << slice << " " << key;
    }
}

}  // namespace
}  // namespace flashattn
