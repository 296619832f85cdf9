// Dropout's keep decisions for the Hopper forward: half of them made by the
// producer warpgroup's idle warps and handed to the consumers through a
// shared-memory ring beside the K/V ring, half by the consumers themselves.
//
// Made by the consumers alone (one Philox call per 8 of their scores, between
// their products), the generator's dependent multiplies stalled the softmax
// that the ping-pong of two consumer warpgroups hides under the other's
// products: 2.7× plain attention's time, issue slots 39% busy. Made by warps
// 1–3 of the producer warpgroup alone (warp 0's thread 0 issues the TMA loads),
// three warps could not keep up: each call's 20 IMAD.WIDE hold the multiply
// pipe 4 cycles each, and one warp's stream of them runs at the pace its
// dependences allow (docs/perf/variants.md, v12). So the generator warps make
// the key blocks at odd ring positions and the consumers the even ones, each
// side with half the calls.
//
// Layout of a stage: per consumer thread, kBytesPerThread bytes; byte m holds
// the decisions of the thread's elements in keys [16m, 16m + 16) of the block,
// in the order of kept_byte (common/dropout.cuh), so the bytes read as one
// word are the fragment's bits, bit 4·nt + e for s[4·nt + e]. Tiles start on
// a multiple of 64 rows (tile_row_shift), so a thread's rows g and g + 8 of
// each 16-row slice are one generator group's rows.
#pragma once

#include <cstdint>

#include "cuda/common/dropout.cuh"
#include "cuda/sm90/pipeline.cuh"
#include "cuda/sm90/producer.cuh"
#include "cuda/sm90/scheduler.cuh"

namespace flashattn::cuda::sm90 {

template <class Tr>
struct KeepBitRing {
  static constexpr int kStages = 4;  // the generator runs up to 4 key blocks ahead
  static constexpr int kGroupsPerThread = Tr::kBlockN / 16;
  static constexpr int kBytesPerThread = kGroupsPerThread <= 4 ? 4 : 8;
  static constexpr int kConsumerThreads = 128 * Tr::kConsumers;
  // A generator's unit: 4 calls, 4 bytes of one consumer thread, one store
  // (the 8th byte at kBlockN 112 made and never read).
  static constexpr int kUnits = kConsumerThreads * kBytesPerThread / 4;
  static constexpr int kGenerators = 96;  // warps 1–3 of the producer warpgroup
  static constexpr uint32_t kStageBytes = kConsumerThreads * kBytesPerThread;
  // After the kernel's own barriers; its stages, then its full and empty barriers.
  static constexpr uint32_t kOffset = (Tr::kBarrierOffset + Tr::kBarrierBytes + 15) / 16 * 16;
  static constexpr uint32_t kBarrierOffset = kOffset + kStages * kStageBytes;
  static constexpr uint32_t kSmemBytes = kBarrierOffset + 16 * kStages + 1024;  // + base alignment
  // setmaxnreg with the generator: 128·48 + 256·224 = 63488, within the
  // registers the launch gives the block (168 a thread; a larger claim would
  // wait forever). The generator holds 4 calls' state and the 20 round keys.
  static constexpr int kProducerRegisters = 48;
  static constexpr int kConsumerRegisters = 224;
  static_assert(128 * kProducerRegisters + 256 * kConsumerRegisters <= 128 * 3 * 168,
                "setmaxnreg cannot claim more than the launch's registers");

  static_assert(Tr::kConsumers == 2, "register split defined for two consumers");
  static_assert(Tr::kCluster == 1, "paired tiles would need the ring in both blocks");
  static_assert(Tr::kBlockN % 16 == 0 && Tr::kBlockN <= 128, "a thread's bits fit 64");
  static_assert(kSmemBytes <= 232448, "beyond the 227 KB a Hopper block may opt into");

  __device__ __forceinline__ static uint64_t* full(uint8_t* smem) {
    return reinterpret_cast<uint64_t*>(smem + kBarrierOffset);
  }
  __device__ __forceinline__ static uint64_t* empty(uint8_t* smem) {
    return full(smem) + kStages;
  }
  __device__ __forceinline__ static uint8_t* stage(uint8_t* smem, int s) {
    return smem + kOffset + s * kStageBytes;
  }
  // Thread 0 before the block's first barrier: the generators' 96 arrivals fill
  // a stage, the 8 consumer warps' free it.
  __device__ __forceinline__ static void init(uint8_t* smem) {
    for (int s = 0; s < kStages; ++s) {
      ::cuda::ptx::mbarrier_init(&full(smem)[s], kGenerators);
      ::cuda::ptx::mbarrier_init(&empty(smem)[s], 4 * Tr::kConsumers);
    }
  }
};

// Whether a variant's kernel runs the generator warps: with dropout, but not
// with a bias, whose consumers need every register of the plain split (they
// spill 216 bytes at 240 registers) and make all their keep bits themselves.
template <class Variant>
constexpr bool kKeepBitRing = Variant::kDropout && !Variant::Score::kBias;

// The kernel's dynamic shared memory: the ring's too where it runs one.
template <class Tr, class Variant>
constexpr uint32_t smem_bytes() {
  if constexpr (kKeepBitRing<Variant>) return KeepBitRing<Tr>::kSmemBytes;
  else return Tr::kSmemBytes;
}

// Whether the generator warps make the keep bits of ring position `it` (the
// consumers make the others), and the position in the keep-bit ring they use.
__device__ __forceinline__ bool generated(int it) { return it & 1; }
__device__ __forceinline__ int keep_ring_position(int it) { return it >> 1; }

// The counter words of consumer thread `thread`'s (0..255) groups of key block
// n_block in a tile at row0: its rows are 16·(its warp) + g and + 8 (g = lane /
// 4), its keys in byte m 16m + 2t + {0, 1, 8, 9} (t = lane mod 4), so byte m
// has key group (n_block·kBlockN/16 + m)·4 + t and row group (row0/16 + its
// warp)·8 + g.
struct FragmentGroups {
  uint32_t key_group, row_group;  // of byte 0
};
template <class Tr>
__device__ __forceinline__ FragmentGroups fragment_groups(int row0, int n_block, int thread) {
  const int lane = thread % 32;
  return {uint32_t(n_block) * (Tr::kBlockN / 16) * 4 + uint32_t(lane % 4),
          uint32_t(row0 >> 4) * 8 + uint32_t(thread / 32) * 8 + uint32_t(lane / 4)};
}

// Bytes [0, kBytes) of a fragment's keep bits from byte 0's counters: calls
// with no branch between them, so that they interleave.
template <int kBytes>
__device__ __forceinline__ uint64_t keep_bytes(const DropoutRows& d, FragmentGroups g) {
  uint64_t bits = 0;
#pragma unroll
  for (int m = 0; m < kBytes; ++m)
    bits |= uint64_t(kept_byte(d, d.call(g.key_group + 4 * m, g.row_group))) << (8 * m);
  return bits;
}

// Generator thread `generator` (0..95): the keep bits of the key blocks at the
// generated ring positions of the block's tiles, in the producer's order, into
// the ring as its stages free up. Unit u is bytes [4·(u mod q), +4) of
// consumer thread u / q (q = kBytesPerThread / 4).
template <class Tr, bool kLowerEnds>
__device__ __forceinline__ void generate_keep_bits(const KernelParams& p, uint8_t* smem,
                                                   int generator) {
  using Ring = KeepBitRing<Tr>;
  constexpr int kUnitsPerThread = Ring::kBytesPerThread / 4;
  int it = 0;
  for_each_tile(p, [&](int index) {
    const Tile t = tile_at<Tr, kLowerEnds>(p, index);
    if (t.n_end <= t.n_first) return;
    const DropoutRows d = dropout_rows(p.dropout, t.batch, p.sizes.heads_q, t.head_q);
    for (int n_block = t.n_end - 1; n_block >= t.n_first; --n_block, ++it) {
      if (!generated(it)) continue;
      const RingPosition<Ring::kStages> ring{keep_ring_position(it)};
      wait_barrier(&Ring::empty(smem)[ring.stage()], ring.free_parity());
      uint8_t* bits = Ring::stage(smem, ring.stage());
      for (int u = generator; u < Ring::kUnits; u += Ring::kGenerators) {
        FragmentGroups g = fragment_groups<Tr>(t.row0, n_block, u / kUnitsPerThread);
        g.key_group += uint32_t(u % kUnitsPerThread) * 16;
        *reinterpret_cast<uint32_t*>(bits + 4 * u) = uint32_t(keep_bytes<4>(d, g));
      }
      arrive(&Ring::full(smem)[ring.stage()]);
    }
  });
}

// A consumer thread's side: `thread` its index among the consumers (0..255);
// without the ring (kRing false) it makes every block's bits itself.
template <class Tr, bool kRing>
struct KeepBitReader {
  using Ring = KeepBitRing<Tr>;
  uint8_t* smem;
  int thread;

  // The keep bits of key block n_block of the tile at row0, at ring position
  // `it`: made here, or taken from the ring and its slot freed (every lane has
  // read before lane 0 arrives).
  __device__ __forceinline__ uint64_t take(const DropoutRows& d, int row0, int n_block,
                                           int it) const {
    if (!kRing || !generated(it))
      return keep_bytes<Ring::kGroupsPerThread>(d, fragment_groups<Tr>(row0, n_block, thread));
    const RingPosition<Ring::kStages> at{keep_ring_position(it)};
    wait_barrier(&Ring::full(smem)[at.stage()], at.filled_parity());
    const uint8_t* src = Ring::stage(smem, at.stage()) + thread * Ring::kBytesPerThread;
    uint64_t bits;
    if constexpr (Ring::kBytesPerThread == 8) bits = *reinterpret_cast<const uint64_t*>(src);
    else bits = *reinterpret_cast<const uint32_t*>(src);
    free(at.stage());
    return bits;
  }
  // Position `it` of a key block the thread's warpgroup skips: a generated one
  // waited for and freed, so that every phase of the barriers completes in turn.
  __device__ __forceinline__ void skip(int it) const {
    if (!kRing || !generated(it)) return;
    const RingPosition<Ring::kStages> at{keep_ring_position(it)};
    wait_barrier(&Ring::full(smem)[at.stage()], at.filled_parity());
    free(at.stage());
  }

 private:
  __device__ __forceinline__ void free(int stage) const {
    __syncwarp();
    if (thread % 32 == 0) arrive(&Ring::empty(smem)[stage]);
  }
};

}  // namespace flashattn::cuda::sm90
