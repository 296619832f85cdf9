// How many of the pool's threads a CPU call wakes (core/parallel.h's
// WorkerCap). Waking a sleeping thread costs about 10 µs on a lent 16-core VM
// (and more on smaller ones: 60-90 µs on the two-core development machine),
// so a call whose work would take one thread W µs wakes about one worker per
// kWorkPerWorkerUs of it: a decode step over a short cache runs on its caller
// alone, a long prefill on every thread (docs/perf/cpu.md).
#pragma once

#include "core/params.h"

namespace flashattn::cpu {

// The workers worth waking for work of `flops` multiply-adds ×2 and `bytes`
// of operands read or written once, at one thread's rates.
int workers_worth_waking(double flops, double bytes);

// The same for a forward and a backward call, from their sizes.
int forward_workers(const AttnParams& p);
int backward_workers(const BwdParams& p);

}  // namespace flashattn::cpu
