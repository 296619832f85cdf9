// dropout_keep_mask: the elements a Dropout keeps, from core/dropout.h's
// generator, the one every backend uses.
#include <vector>

#include "api/validate.h"
#include "core/dropout.h"
#include "core/error.h"
#include "flashattn/flashattn.hpp"

namespace flashattn {

std::vector<uint8_t> dropout_keep_mask(const Dropout& dropout, int batch, int heads_q,
                                       int seqlen_q, int seqlen_k) {
  check_dropout_p(dropout.p);
  require(batch >= 0 && heads_q >= 0 && seqlen_q >= 0 && seqlen_k >= 0,
          "dropout_keep_mask: sizes must be >= 0 (batch ", batch, ", heads_q ", heads_q,
          ", seqlen_q ", seqlen_q, ", seqlen_k ", seqlen_k, ")");
  const DropoutParams d = dropout_params(dropout.p, dropout.seed, dropout.offset);
  std::vector<uint8_t> keep(size_t(batch) * heads_q * seqlen_q * seqlen_k, 1);
  if (!d.on()) return keep;
  // One generator call per group of 8 elements, as the kernels make them.
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads_q; ++h) {
      uint8_t* head = keep.data() + (size_t(b) * heads_q + h) * seqlen_q * seqlen_k;
      dropout_rows(d, b, heads_q, h).for_each(0, seqlen_q, 0, seqlen_k, [&](int i, int j, bool kept) {
        head[size_t(i) * seqlen_k + j] = kept ? 1 : 0;
      });
    }
  return keep;
}

}  // namespace flashattn
