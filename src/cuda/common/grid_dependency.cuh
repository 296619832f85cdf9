// The device side of a programmatic dependent launch (common/launch.h): sm_90
// instructions, nothing on older code, where the launch is an ordinary one.
#pragma once

namespace flashattn::cuda {

// Waits until the kernel before this one on the stream has finished and its
// writes are visible; returns at once where this kernel was launched plainly.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel's blocks be scheduled before this block ends (they still
// wait for this kernel's end before reading its output).
__device__ __forceinline__ void launch_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

}  // namespace flashattn::cuda
