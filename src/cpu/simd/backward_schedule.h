// Which schedule a CPU backward call runs: the two passes (backward.h), whose
// items are tiles, so that any problem fills the threads, or the one pass
// (backward_fused.h), two products fewer per tile but one item per (batch, kv
// head). The choice depends on the problem and the pool's size alone, which
// is fixed for the process, so a call's gradients are the same bits on every
// run. No include guard (see vec.h).

namespace backward {

// The one pass's time for an item's work over the two passes' time for the
// same work, on one thread (measured: docs/perf/cpu.md).
constexpr double kOnePassCost = 0.7;

// Whether the one pass finishes first. Its items are handed out in order to
// whichever thread is free, each costing its sequence's seqlen_q·seqlen_k;
// the two passes' many small items spread their kOnePassCost⁻¹ times larger
// total evenly. So (batch × kv heads) items must give every thread work of
// about equal length: one item per thread, or enough per thread that the
// last round's idle threads cost less than the two products saved.
inline bool one_pass_pays(const BwdParams& p) {
  if (item_dq_floats(p.sizes) * sizeof(float) > kMaxDqBytes) return false;
  const int threads = thread_count();
  // When each thread is next free: a heap with the earliest on top.
  std::vector<double> free_at(size_t(threads), 0.0);
  const auto later = [](double x, double y) { return x > y; };
  double total = 0.0, last = 0.0;
  for (int b = 0; b < p.sizes.batch; ++b) {
    const Sequence seq = sequence(p, b);
    const double work = double(seq.seqlen_q) * double(seq.seqlen_k);
    for (int hk = 0; hk < p.sizes.heads_kv; ++hk) {
      std::pop_heap(free_at.begin(), free_at.end(), later);
      const double done = free_at.back() + work;
      free_at.back() = done;
      std::push_heap(free_at.begin(), free_at.end(), later);
      last = std::max(last, done);
      total += work;
    }
  }
  return kOnePassCost * last <= total / threads;
}

template <typename Variant>
void run_with(const BwdParams& p) {
  const Sizes stored = storage_sizes(p);
  thread_local AlignedBuffer dots_buffer;
  float* dots = dots_buffer.reserve(size_t(stored.batch) * p.sizes.heads_q * stored.seqlen_q);
  row_dots(p, dots);
  if (one_pass_pays(p)) one_pass<Variant>(p, dots);
  else two_passes<Variant>(p, dots);
}

inline void run(const BwdParams& p) {
  with_variant<AnyVariant, BiasVariant>(p, [&](auto variant) { run_with<decltype(variant)>(p); });
}

}  // namespace backward
