// An output's pages mapped before a CPU kernel's items write it (the cpu
// backend's entry, cpu/flash.cpp). Rows of (batch, seqlen, heads, head_dim)
// outputs hold every head side by side, so one page holds a row of several
// heads (8 heads of 128 fp32 fill one), and items of one head each (the
// backward's one pass, the forward's tiles) write the same fresh pages at
// once: every thread then takes its own fault on the page and waits on the
// others'. Fresh pages are what a call's outputs get from glibc's default
// malloc whenever the previous call's were freed (torch allocates them per
// call); on the lent 16-core VM a backward took 3-4 faults per page and ran at
// 0.45-0.65× its speed on mapped memory (docs/perf/cpu.md).
#pragma once

#include "core/params.h"

namespace flashattn {

// Writes 0 to one element of every page of t's elements (batch × rows × heads
// rows of head_dim, in dtype), each thread over a contiguous range of rows, so
// each page is first written by one thread. For outputs only: the kernel then
// writes every element.
void touch_output_pages(const TensorRef& t, DType dtype, int batch, int rows, int heads,
                        int head_dim);

// The same for a forward's out and a backward's dq, dk and dv.
void touch_forward_outputs(const AttnParams& p);
void touch_backward_outputs(const BwdParams& p);

}  // namespace flashattn
