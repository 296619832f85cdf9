// TMA descriptors, encoded by the driver's cuTensorMapEncodeTiled (reached
// through the runtime, so the library does not link libcuda).
#include <cudaTypedefs.h>

#include <cstdint>

#include "core/error.h"
#include "cuda/common/check.h"
#include "cuda/sm90/row_steps.h"
#include "cuda/sm90/tensor_map.h"

namespace flashattn::cuda::sm90 {
namespace {

constexpr int64_t kElementBytes = 2;
constexpr uint64_t kMaxStrideBytes = uint64_t(1) << 40;

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found{};
    FLASHATTN_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000,
                                                          cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || entry == nullptr)
      fail(Status::cuda_error, "cuTensorMapEncodeTiled: not found in the CUDA driver");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(entry);
  }();
  return fn;
}

// A dimension of extent 1 is never stepped along; give TMA any legal stride.
uint64_t stride_bytes(int64_t stride, int extent) {
  return extent == 1 ? 16 : uint64_t(stride * kElementBytes);
}

}  // namespace

std::string tma_unsupported(const TensorRef& t, const char* name, int seqlen, int heads,
                            int batch) {
  if (reinterpret_cast<uintptr_t>(t.data) % 16 != 0)
    return std::string(name) + ": data is not 16-byte aligned, as TMA needs";
  for (const RowStep& d : row_steps(t, seqlen, heads, batch)) {
    if (d.extent == 1) continue;
    const uint64_t bytes = uint64_t(d.stride * kElementBytes);
    if (d.stride <= 0 || bytes % 16 != 0 || bytes >= kMaxStrideBytes)
      return std::string(name) + ": " + d.dim + " stride of " + std::to_string(d.stride) +
             " elements is not a positive multiple of 16 bytes, as TMA needs";
  }
  return {};
}

CUtensorMap make_tensor_map(const TensorRef& t, bool bf16, int head_dim, int seqlen, int heads,
                            int batch, int box_rows) {
  CUtensorMap map;
  const cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(seqlen), cuuint64_t(heads),
                              cuuint64_t(batch)};
  const cuuint64_t strides[3] = {stride_bytes(t.row_stride, seqlen),
                                 stride_bytes(t.head_stride, heads),
                                 stride_bytes(t.batch_stride, batch)};
  const cuuint32_t box[4] = {64, cuuint32_t(box_rows), 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult status = encode_tiled()(
      &map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, t.data,
      dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (status != CUDA_SUCCESS)
    fail(Status::cuda_error, "cuTensorMapEncodeTiled failed with CUresult ", int(status));
  return map;
}

}  // namespace flashattn::cuda::sm90
