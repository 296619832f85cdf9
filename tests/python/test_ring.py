"""Ring attention (context parallelism) in one process: the zigzag layout, the lse merge, and
the ring of W ranks simulated as loop iterations (flashattn._ring.simulate), against the
whole problem's float64 reference, forward and gradients. The same arithmetic runs over
torch.distributed in test_ring_distributed.py. Skipped without torch."""
import math

import pytest

torch = pytest.importorskip("torch")

import flashattn
from flashattn import _ring, _zigzag
from torch_cases import assert_as_accurate_as_plain, plain_outputs, random_bshd
from varlen_cases import per_sequence

OPTIONS = _ring.Options(causal=True, scale=None, backend=None, deterministic=False)


def ring_outputs(q, k, v, dout, world_size, options):
    """(out, lse) and (dq, dk, dv) of the simulated ring, unsharded to the whole sequence."""
    parts = [[flashattn.zigzag_shard(t, world_size, r) for r in range(world_size)]
             for t in (q, k, v, dout)]
    results = _ring.simulate(*parts[:3], options)
    outs, lses = [r[0] for r in results], [r[1] for r in results]
    grads = _ring.simulate_backward(*parts[:3], outs, lses, parts[3], options)
    out = flashattn.zigzag_unshard(outs)
    lse = flashattn.zigzag_unshard(lses, dim=2)
    return (out, lse), tuple(flashattn.zigzag_unshard([g[i] for g in grads]) for i in range(3))


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("heads,head_dim", [((4, 2), 32), ((2, 2), 1), ((3, 1), 80)],
                         ids=["gqa-d32", "mha-d1", "mqa-d80"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_simulated_ring_equals_the_whole_problem(world_size, causal, heads, head_dim, dtype):
    seqlen = 2 * world_size * 5
    q, k, v = random_bshd(2, seqlen, seqlen, *heads, head_dim, dtype=dtype,
                          seed=world_size + 10 * head_dim)
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(3)).to(dtype)
    options = OPTIONS._replace(causal=causal)
    (out, lse), grads = ring_outputs(q, k, v, dout, world_size, options)
    assert_as_accurate_as_plain((out,), (q, k, v), causal=causal)
    assert_as_accurate_as_plain(grads, (q, k, v, dout), causal=causal)
    _, whole_lse = flashattn.attention(q, k, v, causal=causal, return_lse=True)
    torch.testing.assert_close(lse, whole_lse, rtol=1e-5, atol=1e-5)


def packed_ring_outputs(q, k, v, dout, cu_seqlens, world_size, options):
    """out and (dq, dk, dv) of the simulated ring over a packed batch, unsharded."""
    parts = [[flashattn.zigzag_shard_packed(t, cu_seqlens, world_size, r)[None]
              for r in range(world_size)] for t in (q, k, v, dout)]
    halves = torch.tensor(cu_seqlens, dtype=torch.int32) // (2 * world_size)
    layout = _ring.Packed(halves, None)
    results = _ring.simulate(*parts[:3], options, layout)
    outs, lses = [r[0] for r in results], [r[1] for r in results]
    grads = _ring.simulate_backward(*parts[:3], outs, lses, parts[3], options, layout)
    out = flashattn.zigzag_unshard_packed([o[0] for o in outs], cu_seqlens)
    return out, tuple(flashattn.zigzag_unshard_packed([g[i][0] for g in grads], cu_seqlens)
                      for i in range(3))


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_simulated_ring_over_a_packed_batch_treats_each_sequence_alone(world_size, causal,
                                                                       dtype):
    lengths = [2 * world_size * n for n in (3, 1, 0, 5)]
    cu_seqlens = [0]
    for n in lengths:
        cu_seqlens.append(cu_seqlens[-1] + n)
    total = cu_seqlens[-1]
    g = torch.Generator().manual_seed(world_size)
    q = torch.randn(total, 4, 16, generator=g).to(dtype)
    k, v = (torch.randn(total, 2, 16, generator=g).to(dtype) for _ in range(2))
    dout = torch.randn(q.shape, generator=g).to(dtype)
    options = OPTIONS._replace(causal=causal)
    out, grads = packed_ring_outputs(q, k, v, dout, cu_seqlens, world_size, options)
    plain = per_sequence(plain_outputs, cu_seqlens, cu_seqlens, concatenate=torch.cat)
    assert_as_accurate_as_plain((out,), (q, k, v), plain=plain, causal=causal)
    assert_as_accurate_as_plain(grads, (q, k, v, dout), plain=plain, causal=causal)


def test_packed_shard_names_the_sequence_that_does_not_split():
    with pytest.raises(flashattn.InvalidArgumentError,
                       match=r"cu_seqlens: sequence 1 has length 6, must be a multiple of "
                             r"2·world_size = 4"):
        flashattn.zigzag_shard_packed(torch.zeros(14, 1, 1), [0, 8, 14], 2, 0)
    x = torch.arange(24).reshape(24, 1, 1)
    parts = [flashattn.zigzag_shard_packed(x, [0, 8, 24], 2, r) for r in range(2)]
    assert parts[0].flatten().tolist() == [0, 1, 8, 9, 10, 11, 6, 7, 20, 21, 22, 23]
    assert torch.equal(flashattn.zigzag_unshard_packed(parts, [0, 8, 24]), x)


def test_simulated_ring_takes_a_scale_and_stays_deterministic():
    q, k, v = random_bshd(1, 24, 24, 2, 2, 16, seed=5)
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(6))
    options = OPTIONS._replace(scale=0.3, deterministic=True)
    first = ring_outputs(q, k, v, dout, 3, options)
    second = ring_outputs(q, k, v, dout, 3, options)
    for a, b in zip((*first[0], *first[1]), (*second[0], *second[1])):
        assert torch.equal(a, b)
    assert_as_accurate_as_plain((first[0][0],), (q, k, v), causal=True, scale=0.3)
    assert_as_accurate_as_plain(first[1], (q, k, v, dout), causal=True, scale=0.3)


def test_nan_in_one_query_reaches_only_its_row_as_in_the_whole_problem():
    q, k, v = random_bshd(1, 16, 16, 2, 2, 8, seed=8)
    q[0, 11, 1, 3] = float("nan")
    dout = torch.ones(q.shape)
    (out, _), _ = ring_outputs(q, k, v, dout, 2, OPTIONS)
    whole = flashattn.attention(q, k, v, causal=True)
    assert torch.equal(out.isnan(), whole.isnan())
    assert out.isnan().any()


@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
def test_the_steps_cover_the_causal_mask_once(world_size):
    """Over the ring's steps each rank's blocks, mapped back to positions in the sequence,
    cover exactly the causal mask's (query, key) pairs, each once, and every rank computes
    the same number of pairs."""
    seqlen = 2 * world_size * 3
    positions = torch.arange(seqlen)[None, :, None, None]
    local = [_zigzag.shard(positions, world_size, r)[0, :, 0, 0] for r in range(world_size)]
    covered = torch.zeros(seqlen, seqlen, dtype=torch.int64)
    work = []
    for rank in range(world_size):
        pairs = 0
        for step in range(world_size):
            source = (rank - step) % world_size
            b = _zigzag.block(rank, source, len(local[rank]), causal=True)
            rows, keys = local[rank][b.rows], local[source][b.keys]
            visible = torch.ones(len(rows), len(keys), dtype=torch.bool)
            if b.causal:
                visible = visible.tril()
            for i, j in visible.nonzero().tolist():
                covered[rows[i], keys[j]] += 1
            pairs += int(visible.sum())
        work.append(pairs)
    assert torch.equal(covered, torch.ones(seqlen, seqlen, dtype=torch.int64).tril())
    assert len(set(work)) == 1


def test_shard_and_unshard_invert_each_other():
    x = torch.arange(2 * 24 * 3).reshape(2, 24, 3, 1)
    parts = [flashattn.zigzag_shard(x, 3, r) for r in range(3)]
    assert [p.shape[1] for p in parts] == [8, 8, 8]
    assert parts[0][0, :, 0, 0].tolist() == [0, 3, 6, 9, 60, 63, 66, 69]
    assert torch.equal(flashattn.zigzag_unshard(parts), x)


def test_shard_names_the_rule_it_breaks():
    x = torch.zeros(1, 10, 1, 1)
    with pytest.raises(flashattn.InvalidArgumentError,
                       match=r"x: sequence length is 10, must be a multiple of 2·world_size = 4"):
        flashattn.zigzag_shard(x, 2, 0)
    with pytest.raises(flashattn.InvalidArgumentError, match=r"rank: is 2, must be an int in"):
        flashattn.zigzag_shard(x, 2, 2)
    with pytest.raises(flashattn.InvalidArgumentError, match=r"world_size: is 0"):
        flashattn.zigzag_shard(x, 0, 0)
    with pytest.raises(flashattn.InvalidArgumentError, match=r"shards: lengths along dim 1"):
        flashattn.zigzag_unshard([torch.zeros(1, 4, 1, 1), torch.zeros(1, 6, 1, 1)])


def test_merge_weighs_each_part_by_its_share_and_keeps_empty_rows_zero():
    out = torch.tensor([[[[1.0]], [[0.0]], [[5.0]]]])        # (1, 3 rows, 1 head, 1)
    lse = torch.tensor([[[0.0, -math.inf, -math.inf]]])       # (1, 1 head, 3 rows)
    block_out = torch.tensor([[[[3.0]], [[2.0]], [[0.0]]]])
    block_lse = torch.tensor([[[0.0, 1.0, -math.inf]]])
    _ring.merge(out, lse, block_out, block_lse)
    assert out.flatten().tolist() == [2.0, 2.0, 0.0]
    torch.testing.assert_close(lse, torch.tensor([[[math.log(2.0), 1.0, -math.inf]]]))


def test_ring_attention_needs_an_initialised_process_group():
    q = torch.zeros(1, 4, 1, 8)
    with pytest.raises(flashattn.InvalidArgumentError, match="torch.distributed is not "
                                                             "initialised"):
        flashattn.ring_attention(q, q, q)
