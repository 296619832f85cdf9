"""Dropout's arguments: flashattn.attention's dropout_p, dropout_seed, dropout_offset and
generator, as the (p, seed, offset) triple the library takes (flashattn_variants' dropout
fields), and flashattn.dropout_mask."""
import numpy as np

from . import _abi, _library, _options

SEED_END = 2**64  # seeds and offsets are uint64 in the library
DRAW_END = 2**63  # a drawn seed fits the torch ops' int64 arguments too


def seed_value(name, x):
    """x as an int in [0, 2**64): a Python or NumPy int, not a bool."""
    x = _options.int_or_symbolic(x, f"{name}: is", "a uint64")
    if not _options.is_symbolic(x) and not 0 <= x < SEED_END:
        raise ValueError(f"{name}: is {x}, must be in [0, 2**64)")
    return x


def draw_seed(generator):
    """A fresh seed from `generator`: a torch.Generator (its device's; a CUDA one makes
    the call wait for the GPU to read the number back), a numpy.random.Generator, or None
    (torch's default CPU generator when torch is loaded, which torch.manual_seed seeds, else
    NumPy's fresh entropy)."""
    if isinstance(generator, np.random.Generator):
        return int(generator.integers(0, DRAW_END, dtype=np.uint64))
    import sys
    torch = sys.modules.get("torch")
    if generator is not None and (torch is None or not isinstance(generator, torch.Generator)):
        raise TypeError(f"generator: is a {_options.type_name(generator)}, must be a "
                        f"torch.Generator, a numpy.random.Generator or None")
    if torch is None:
        return int(np.random.default_rng().integers(0, DRAW_END, dtype=np.uint64))
    device = generator.device if generator is not None else "cpu"
    return int(torch.randint(0, DRAW_END - 1, (), generator=generator, device=device).item())


def dropout_values(dropout_p, dropout_seed, dropout_offset, generator=None):
    """(p, seed, offset) for the library, or None without dropout (p 0). dropout_seed None
    draws one from generator (draw_seed); the library checks that p lies in [0, 1]."""
    p = _options.float32_number("dropout_p", dropout_p)
    if p == 0.0:
        return None
    seed = draw_seed(generator) if dropout_seed is None else seed_value("dropout_seed",
                                                                        dropout_seed)
    return p, seed, seed_value("dropout_offset", dropout_offset)


def library_dropout(dropout):
    """A dropout_values() result as flashattn_variants' fields."""
    return _abi.NO_DROPOUT if dropout is None else dropout


def dropout_mask(dropout_p, dropout_seed, batch, heads_q, seqlen_q, seqlen_k, dropout_offset=0):
    """Which elements dropout keeps: a bool NumPy array (batch, heads_q, seqlen_q, seqlen_k),
    True where attention(..., dropout_p=dropout_p, dropout_seed=dropout_seed,
    dropout_offset=dropout_offset) keeps probability (b, h, i, j) (and scales it by
    1/(1 - p), p rounded to a multiple of 2**-16), False where it drops it. The same on every
    backend: the library's generator, not a copy. Sequence b of a variable-length batch is
    batch 1 at dropout_offset + b·heads_q."""
    p = _options.float32_number("dropout_p", dropout_p)
    sizes = [_options.int_or_symbolic(n, f"{name}: is", "a size")
             for name, n in (("batch", batch), ("heads_q", heads_q), ("seqlen_q", seqlen_q),
                             ("seqlen_k", seqlen_k))]
    keep = _library.dropout_keep_mask(p, seed_value("dropout_seed", dropout_seed),
                                      seed_value("dropout_offset", dropout_offset), *sizes)
    return keep.astype(bool)
