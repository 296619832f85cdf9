// Synchronisation for the warp-specialised Hopper forward: mbarrier waits and
// arrivals, TMA tile copies between global and shared memory, named barriers
// and the register hand-over between warpgroups. Thin wrappers over cuda::ptx.
#pragma once

#include <cuda/ptx>

#include <cstdint>

namespace flashattn::cuda::sm90 {

// Spins until the barrier's phase of the given parity has completed. A fresh
// barrier counts its (non-existent) previous phase, of parity 1, as complete.
__device__ __forceinline__ void wait_barrier(uint64_t* barrier, uint32_t parity) {
  while (!::cuda::ptx::mbarrier_try_wait_parity(barrier, parity)) {
  }
}

__device__ __forceinline__ void arrive(uint64_t* barrier) {
  ::cuda::ptx::mbarrier_arrive(barrier);
}

// Arrives on the barrier at the same shared-memory offset in block `cta_rank`
// of this block's cluster (this block included). The release is the CTA's, as
// for a local arrive: what it publishes is that this block's products have
// finished reading a ring slot (they were waited for), which needs no fence;
// cluster scope would put a fence over all of GPU memory before every arrive.
__device__ __forceinline__ void arrive_in_cluster(uint64_t* barrier, uint32_t cta_rank) {
  const uint32_t local = static_cast<uint32_t>(__cvta_generic_to_shared(barrier));
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(cta_rank));
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}

__device__ __forceinline__ uint32_t cluster_rank() { return ::cuda::ptx::get_sreg_cluster_ctarank(); }

// Every thread of every block of the cluster; orders shared-memory writes
// (barrier initialisation) before the other blocks' later accesses.
__device__ __forceinline__ void cluster_sync() {
  ::cuda::ptx::barrier_cluster_arrive(::cuda::ptx::sem_release);
  ::cuda::ptx::barrier_cluster_wait(::cuda::ptx::sem_acquire);
}

// The next phase of `barrier` completes when `bytes` have landed (and its one
// expected arrival, this one, has happened).
__device__ __forceinline__ void expect_bytes(uint64_t* barrier, uint32_t bytes) {
  ::cuda::ptx::mbarrier_arrive_expect_tx(::cuda::ptx::sem_release, ::cuda::ptx::scope_cta,
                                         ::cuda::ptx::space_shared, barrier, bytes);
}

// One box of a rank-4 (head_dim, seqlen, heads, batch) tensor map into shared
// memory; completion counts on `barrier`. Out-of-range elements arrive as zeros.
__device__ __forceinline__ void tma_load(void* smem_dst, const void* tensor_map, int col, int row,
                                         int head, int batch, uint64_t* barrier) {
  const int32_t coords[4] = {col, row, head, batch};
  ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_cluster, ::cuda::ptx::space_global, smem_dst,
                                    tensor_map, coords, barrier);
}

// The same box into the same shared-memory offset of every block in
// `cta_mask` (bit i: cluster rank i); each block's barrier at `barrier`'s
// offset counts the bytes that land in that block.
__device__ __forceinline__ void tma_load_multicast(void* smem_dst, const void* tensor_map, int col,
                                                   int row, int head, int batch, uint64_t* barrier,
                                                   uint16_t cta_mask) {
  const int32_t coords[4] = {col, row, head, batch};
  ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_cluster, ::cuda::ptx::space_global, smem_dst,
                                    tensor_map, coords, barrier, cta_mask);
}

// One box from shared memory to the tensor; elements out of range are dropped.
__device__ __forceinline__ void tma_store(const void* tensor_map, int col, int row, int head,
                                          int batch, const void* smem_src) {
  const int32_t coords[4] = {col, row, head, batch};
  ::cuda::ptx::cp_async_bulk_tensor(::cuda::ptx::space_global, ::cuda::ptx::space_shared,
                                    tensor_map, coords, smem_src);
}

// Closes the group of this thread's TMA stores issued so far.
__device__ __forceinline__ void tma_store_commit() { ::cuda::ptx::cp_async_bulk_commit_group(); }

// Waits until this thread's committed TMA stores have read their shared memory.
__device__ __forceinline__ void tma_store_wait_read() {
  ::cuda::ptx::cp_async_bulk_wait_group_read(::cuda::ptx::n32_t<0>{});
}

// dst[i] += src[i] for the bytes / 4 floats at smem_src, by the bulk copy
// engine (16-byte aligned, bytes a multiple of 16); a store for
// tma_store_commit's groups and their waits.
__device__ __forceinline__ void bulk_reduce_add(float* dst, const void* smem_src, uint32_t bytes) {
  const uint32_t src = static_cast<uint32_t>(__cvta_generic_to_shared(smem_src));
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
               "r"(src), "r"(bytes)
               : "memory");
}

// Waits until this thread's committed bulk stores and reductions are complete
// (their writes performed), not only their shared-memory reads.
__device__ __forceinline__ void tma_store_wait_all() {
  ::cuda::ptx::cp_async_bulk_wait_group(::cuda::ptx::n32_t<0>{});
}

// Makes this thread's ordinary shared-memory writes visible to the async proxy
// (TMA, wgmma) once a barrier has ordered them.
__device__ __forceinline__ void fence_shared_to_async() {
  ::cuda::ptx::fence_proxy_async(::cuda::ptx::space_shared);
}

// Barrier among `threads` threads on hardware barrier `id` (1–15; 0 is __syncthreads).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// named_barrier_sync that also returns whether `pred` held in any of the threads.
__device__ __forceinline__ bool named_barrier_any(int id, int threads, bool pred) {
  uint32_t any;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, %3, p;\n"
      " selp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(any)
      : "r"(uint32_t(pred)), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}

// One arrival of `threads` threads (hardware barrier `id`) counted on
// `counter` by the thread where `counts` holds, once every thread's earlier
// global writes are performed (each fenced, then the barrier); returns to all
// whether it was the `total`-th, the last, whose later reads (after the
// second fence) then see the other arrivals' writes. The split tails'
// merges (tail_merge.cuh, backward_kernel.cuh's finish_tail_part).
__device__ __forceinline__ bool arrive_last(int* counter, int total, int id, int threads,
                                            bool counts) {
  __threadfence();
  named_barrier_sync(id, threads);
  const bool last = named_barrier_any(id, threads, counts && atomicAdd(counter, 1) == total - 1);
  if (last) __threadfence();
  return last;
}

// Arrives on hardware barrier `id` without waiting for it to complete.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

template <int kRegisters>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

template <int kRegisters>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

}  // namespace flashattn::cuda::sm90
