// fp32 products on tensor cores at fp32 accuracy: each operand x is split into
// big = tf32(x) (round to nearest, 10 mantissa bits) and small = x − big, and
//   a·b ≈ big_a·big_b + big_a·small_b + small_a·big_b,
// dropping small_a·small_b (relative 2^-22). The small parts go to the tensor
// core as raw fp32 bits, which it truncates to tf32: error 2^-11 of a term that
// is itself 2^-11 of the product. Three m16n8k8 mma.sync per product.
//
// Fragment layouts of mma.m16n8k8 (g = lane / 4, t = lane % 4):
//   A 16×8:  a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)
//   B 8×8:   b0 (k t, n g), b1 (k t+4, n g)
//   C 16×8:  c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1)
#pragma once

#include <cstdint>

namespace flashattn::cuda {

struct SplitTf32 {
  uint32_t big, small;
};

__device__ __forceinline__ SplitTf32 split_tf32(float x) {
  uint32_t big;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(big) : "f"(x));
  return {big, __float_as_uint(x - __uint_as_float(big))};
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// c += a·b at fp32 accuracy, a (16×8) and b (8×8) given as fp32 fragments.
struct FragA {
  uint32_t big[4], small[4];
};
struct FragB {
  uint32_t big[2], small[2];
};

__device__ __forceinline__ FragA split_a(const float (&a)[4]) {
  FragA f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const SplitTf32 s = split_tf32(a[i]);
    f.big[i] = s.big;
    f.small[i] = s.small;
  }
  return f;
}

__device__ __forceinline__ FragB split_b(float b0, float b1) {
  const SplitTf32 s0 = split_tf32(b0), s1 = split_tf32(b1);
  return {{s0.big, s1.big}, {s0.small, s1.small}};
}

// Small terms first, so they are added while the accumulator is still small.
__device__ __forceinline__ void mma_tf32x3(float (&c)[4], const FragA& a, const FragB& b) {
  mma_tf32(c, a.big, b.small);
  mma_tf32(c, a.small, b.big);
  mma_tf32(c, a.big, b.big);
}

}  // namespace flashattn::cuda
