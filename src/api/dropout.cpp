// dropout_keep_mask: the elements a Dropout keeps, from core/dropout.h's
// generator, the one every backend uses.
#include <cmath>
#include <vector>

#include "core/dropout.h"
#include "api/validate.h"
#include "core/error.h"
#include "flashattn/flashattn.hpp"

namespace flashattn {

void check_dropout_p(float p) {
  require(std::isfinite(p) && p >= 0.0f && p <= 1.0f, "variants.dropout.p: is ", p,
          ", must be in [0, 1] (0: none)");
}

std::vector<uint8_t> dropout_keep_mask(const Dropout& dropout, int batch, int heads_q,
                                       int seqlen_q, int seqlen_k) {
  check_dropout_p(dropout.p);
  require(batch >= 0 && heads_q >= 0 && seqlen_q >= 0 && seqlen_k >= 0,
          "dropout_keep_mask: sizes must be >= 0 (batch ", batch, ", heads_q ", heads_q,
          ", seqlen_q ", seqlen_q, ", seqlen_k ", seqlen_k, ")");
  const DropoutParams d = dropout_params(dropout.p, dropout.seed, dropout.offset);
  std::vector<uint8_t> keep(size_t(batch) * heads_q * seqlen_q * seqlen_k, 1);
  if (!d.on()) return keep;
  size_t at = 0;
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads_q; ++h) {
      const DropoutRows rows = dropout_rows(d, b, heads_q, h);
      for (int i = 0; i < seqlen_q; ++i)
        for (int j = 0; j < seqlen_k; ++j) keep[at++] = rows.keep(i, j) ? 1 : 0;
    }
  return keep;
}

}  // namespace flashattn
