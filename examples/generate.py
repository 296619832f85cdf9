"""Generates text with examples/train_gpt.py's GPT on flashattn's inference API and on PyTorch's
SDPA, and compares the tokens and the speed.

A batch of prompts of different lengths (byte strings from the standard library's source) is
continued greedily, from the same weights, two ways (examples/decoders.py):
- flashattn: the prompts packed without padding and prefilled with flashattn.varlen_attention
  (causal), each layer's keys and values copied into a KV cache (contiguous, or paged with
  --paged), then one token per sequence per step with flashattn.attention_with_kvcache, which
  appends the step's keys and values (on CUDA both unchecked, checked=False: no host wait;
  the prefix sums and lengths are checked on the device); --cuda-graph also replays the step
  from a CUDA graph;
- PyTorch: the prompts left-padded into one batch with an attention mask, then a dense padded
  cache with the padding masked out.
It prints each one's prefill time and decode tokens per second (median and range over
--repeats rounds after --warmup, the ways taking turns), their ratio, and how many tokens
agree. In fp32 (the CPU) every token must; in bf16 (CUDA) rounding can flip a near-tie, after
which that sequence continues differently, so the first divergence of each is printed.

    python examples/generate.py                     # GPU: bf16, 32 prompts, 96 new tokens
    python examples/generate.py --paged --page-size 16 --cuda-graph
    python examples/generate.py --device cpu --train-steps 0 --layers 1 --d-model 64 --heads 2

The weights are random, or trained for --train-steps with train_gpt's loop first (under bf16
autocast on CUDA), then cast to bf16 on CUDA. flashattn must be importable: `pip install .`,
or FLASHATTN_LIBRARY=build/libflashattn.so PYTHONPATH=python (see python/README.md).
"""
import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import train_gpt
from decoders import PackedCacheDecoder, PaddedDecoder


def prompts(data, args):
    """args.batch byte strings at random places of data, of lengths drawn uniformly from
    args.prompt_lengths."""
    generator = torch.Generator().manual_seed(args.seed)
    shortest, longest = args.prompt_lengths
    lengths = torch.randint(shortest, longest + 1, (args.batch,), generator=generator)
    starts = torch.randint(0, len(data) - longest, (args.batch,), generator=generator)
    return [data[s:s + n] for s, n in zip(starts.tolist(), lengths.tolist())]


def build_model(train_data, args, device):
    """The GPT, trained for args.train_steps (train_gpt's loop, batch and learning rate),
    ready for inference (eval mode, no gradients): bf16 on CUDA, fp32 on the CPU."""
    torch.manual_seed(args.seed)
    model = train_gpt.GPT(args.layers, args.d_model, args.heads, args.context,
                          F.scaled_dot_product_attention).to(device)
    if args.train_steps:
        training = argparse.Namespace(steps=args.train_steps, batch=32, context=args.context,
                                      lr=1e-3, compile=False, log_every=0)
        losses, _ = train_gpt.fit(model, "train", args.seed, train_data, training, device)
        tail = losses[-max(1, len(losses) // 10):]
        print(f"trained {args.train_steps} steps: loss {losses[0]:.3f} -> "
              f"{statistics.fmean(tail):.3f} (mean of the last {len(tail)})")
    model.eval().requires_grad_(False)
    return model.to(torch.bfloat16) if device.type == "cuda" else model


class Clock:
    """Marks on the device's timeline: CUDA events on the GPU (no host wait until the
    intervals are read), perf_counter on the CPU."""

    def __init__(self, device):
        self.cuda, self.marks = device.type == "cuda", []

    def mark(self):
        if self.cuda:
            self.marks.append(torch.cuda.Event(enable_timing=True))
            self.marks[-1].record()
        else:
            self.marks.append(time.perf_counter())

    def intervals(self):
        """Seconds between consecutive marks."""
        if self.cuda:
            self.marks[-1].synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def generate(decoder, step, new_tokens, device, keep_logits=False):
    """One greedy generation: (tokens (batch, new_tokens), logits (batch, new_tokens, vocab)
    in fp32 or None without keep_logits, prefill s, decode s). The prefill gives the first
    new token, each of the new_tokens - 1 steps one more."""
    clock = Clock(device)
    clock.mark()
    decoder.prefill()
    clock.mark()
    tokens, logits = [], []
    for i in range(new_tokens):
        if i:
            step()
        tokens.append(decoder.tokens.clone())
        if keep_logits:
            logits.append(decoder.logits.to(torch.float32, copy=True))
    clock.mark()
    prefill, decode = clock.intervals()
    return (torch.cat(tokens, dim=1).cpu(),
            torch.stack(logits, dim=1).cpu() if keep_logits else None, prefill, decode)


def captured(decoder):
    """decoder.step recorded in a CUDA graph: its replay. One step first runs on a side
    stream, as capture wants (lazy initialisations out of the graph); every generation
    starts with a prefill, which resets what that step changed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        decoder.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        decoder.step()
    return graph.replay


def spread(values):
    """'median (min-max)' of values."""
    return f"{statistics.median(values):10.2f} ({min(values):.2f}-{max(values):.2f})"


def agreement(name, ours, theirs, exact):
    """Prints how many of ours' tokens equal theirs', each sequence's first divergence, and
    the largest difference of their logits where both saw the same tokens (up to the
    first divergence: after it the inputs differ). ours, theirs: generate()'s (tokens,
    logits). exact (fp32): logits within 1e-4 of their scale. Returns whether all tokens
    are equal and, if exact, the logits close."""
    (our_tokens, our_logits), (their_tokens, their_logits) = ours, theirs
    same = our_tokens == their_tokens
    first = {b: int((~row).nonzero()[0]) for b, row in enumerate(same) if not row.all()}
    where = ", ".join(f"{b}: {i}" for b, i in first.items()) or "none"
    print(f"tokens, {name}: {int(same.sum())} of {same.numel()} identical "
          f"({100 * same.float().mean():.2f}%); first divergence (sequence: token) {where}")
    position = torch.arange(same.shape[1])
    seen_alike = torch.stack([position <= first.get(b, same.shape[1])
                              for b in range(same.shape[0])])
    difference = (our_logits - their_logits).abs().amax(-1)[seen_alike].max().item()
    scale = their_logits.abs().max().item()
    print(f"logits, {name}: largest difference on the same inputs {difference:.3g} "
          f"(largest logit {scale:.3g})")
    return not first and (not exact or difference <= 1e-4 * scale)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--context", type=int, default=256,
                   help="the model's positions: the longest prompt plus the new tokens")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-steps", type=int, default=200, help="0: random weights")
    p.add_argument("--batch", type=int, default=32, help="prompts")
    p.add_argument("--prompt-lengths", type=int, nargs=2, default=[16, 160],
                   metavar=("SHORTEST", "LONGEST"))
    p.add_argument("--new-tokens", type=int, default=96)
    p.add_argument("--paged", action="store_true", help="flashattn's cache in pages")
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--cuda-graph", action="store_true",
                   help="also time flashattn's decode step replayed from a CUDA graph")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--corpus-bytes", type=int, default=8 << 20,
                   help="bytes of standard-library source (prompts from the last tenth)")
    args = p.parse_args()
    shortest, longest = args.prompt_lengths
    if args.d_model % args.heads:
        p.error(f"--d-model {args.d_model} is not a multiple of --heads {args.heads}")
    if not 1 <= shortest <= longest:
        p.error(f"--prompt-lengths {shortest} {longest}: must be 1 <= SHORTEST <= LONGEST")
    if args.new_tokens < 2:
        p.error(f"--new-tokens {args.new_tokens}: must be at least 2 (one decode step)")
    if longest + args.new_tokens - 1 > args.context:
        p.error(f"--prompt-lengths' LONGEST {longest} + --new-tokens {args.new_tokens} - 1 "
                f"is past --context {args.context} (the model's positions)")
    if args.page_size < 1:
        p.error(f"--page-size {args.page_size}: must be at least 1")
    if args.cuda_graph and not args.device.startswith("cuda"):
        p.error("--cuda-graph needs --device cuda")
    if args.repeats < 1 or args.warmup < 0:
        p.error("--repeats must be at least 1 and --warmup at least 0")
    return args


def timed(ways, args, device):
    """Each way's (prefill ms, decode tokens/s) medians, printed with their ranges, over
    args.repeats rounds after args.warmup, the ways taking turns within each round."""
    rounds = {name: [] for name in ways}
    for _ in range(args.warmup + args.repeats):
        for name, (decoder, step) in ways.items():
            rounds[name].append(generate(decoder, step, args.new_tokens, device)[2:])
    decoded = args.batch * (args.new_tokens - 1)
    print(f"{'':<24}{'prefill ms, median (min-max)':>32}{'decode tok/s, median (min-max)':>38}")
    timings = {}
    for name, results in rounds.items():
        prefill = [1e3 * r[0] for r in results[args.warmup:]]
        decode = [decoded / r[1] for r in results[args.warmup:]]
        timings[name] = statistics.median(prefill), statistics.median(decode)
        print(f"{name:<24}{spread(prefill):>32}{spread(decode):>38}")
    return timings


def compare(checks, timings, exact):
    """Prints how each flashattn way's tokens and logits compare with torch SDPA's (and a
    CUDA graph's replays with the eager steps: the same kernels on the same inputs, bit for
    bit unless a library chooses other kernels under capture), and the speed ratios.
    Returns whether everything that must agree does: the graph's tokens with the eager
    steps' always, the tokens and logits with torch SDPA's in fp32 (exact)."""
    reference, base = checks["torch SDPA, padded"], timings["torch SDPA, padded"]
    agree = {name: agreement(f"{name} vs torch SDPA", check, reference, exact)
             for name, check in checks.items() if name.startswith("flashattn")}
    for name in agree:
        print(f"speed, {name} over torch SDPA: prefill {base[0] / timings[name][0]:.2f}x, "
              f"decode {timings[name][1] / base[1]:.2f}x")
    ok = all(agree.values()) or not exact
    if "flashattn, CUDA graph" in checks:
        (graph_tokens, graph_logits), (tokens, logits) = (checks["flashattn, CUDA graph"],
                                                          checks["flashattn"])
        replayed = torch.equal(graph_tokens, tokens)
        difference = (graph_logits - logits).abs().max().item()
        print(f"CUDA graph replays against the eager steps: tokens "
              f"{'identical' if replayed else 'DIFFERENT'}, logits "
              f"{'bit for bit' if difference == 0 else f'differ by up to {difference:.3g}'}")
        ok = ok and replayed
    rule = ("fp32: required" if exact else
            "bf16: not required, rounding may flip a near-tie; the logits show how close")
    print(f"same tokens as torch SDPA{', logits within 1e-4' if exact else ''}: "
          f"{'yes' if all(agree.values()) else 'NO'} ({rule})")
    return ok


def main():
    args = parse_args()
    device = torch.device(args.device)
    data = train_gpt.corpus_bytes(args.corpus_bytes)
    split = int(0.9 * len(data))
    model = build_model(data[:split], args, device)
    batch = prompts(data[split:], args)
    lengths = [len(p) for p in batch]
    layout = f"paged ({args.page_size}-key pages)" if args.paged else "contiguous"
    print(f"model: {args.layers} layers, d_model {args.d_model}, {args.heads} heads of "
          f"{args.d_model // args.heads}, {'bf16' if device.type == 'cuda' else 'fp32'} on "
          f"{device}; {args.batch} prompts of {min(lengths)}-{max(lengths)} bytes "
          f"({sum(lengths)} in all), {args.new_tokens} new tokens each; flashattn's KV cache "
          f"{layout}", flush=True)
    with torch.inference_mode():
        ours = PackedCacheDecoder(model, batch, args.new_tokens,
                                  args.page_size if args.paged else None,
                                  checked=device.type != "cuda", seed=args.seed)
        theirs = PaddedDecoder(model, batch, args.new_tokens)
        ways = {"flashattn": (ours, ours.step)}
        if args.cuda_graph:
            ways["flashattn, CUDA graph"] = (ours, captured(ours))
        ways["torch SDPA, padded"] = (theirs, theirs.step)
        checks = {name: generate(decoder, step, args.new_tokens, device, keep_logits=True)[:2]
                  for name, (decoder, step) in ways.items()}
        timings = timed(ways, args, device)
    ok = compare(checks, timings, exact=device.type != "cuda")
    text = bytes(checks["flashattn"][0][0].tolist()).decode("utf-8", "replace")
    print(f"sample: {bytes(batch[0][-40:].tolist()).decode('utf-8', 'replace')!r} -> {text!r}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
