"""Two ways to run examples/train_gpt.py's GPT for greedy generation, with one interface:
prefill() runs the prompts and leaves each sequence's first new token in `tokens` (batch,
1) and the logits it was chosen from in `logits` (batch, vocab); step() feeds `tokens`
through the model once and leaves the next ones, and their logits, there.

- PackedCacheDecoder, flashattn: the prompts packed without padding, prefilled with
  flashattn.varlen_attention; then flashattn.attention_with_kvcache over a KV cache,
  contiguous or paged, which appends each step's keys and values itself.
- PaddedDecoder, PyTorch's SDPA the standard way: the prompts left-padded into one batch
  with an attention mask, then a dense cache in which every sequence appends at the same
  column, the padding masked out.

Both hold every buffer they use between calls, so a step can be captured in a CUDA graph
where its calls allow it (PackedCacheDecoder with checked=False).
"""
import torch
import torch.nn.functional as F

import flashattn


def model_shape(model):
    """(layers, heads, head_dim, device, dtype) of a train_gpt.GPT."""
    heads = model.blocks[0].heads
    weight = model.embed.weight
    return len(model.blocks), heads, weight.shape[1] // heads, weight.device, weight.dtype


class PackedCacheDecoder:
    """flashattn: packed prefill, then one token per sequence per step over a KV cache.

    The cache holds every layer's keys: (layers, batch, capacity, heads, head_dim), or with
    page_size (layers, pages, page_size, heads, head_dim) and a block table giving each
    sequence's pages, in a shuffled order so that the indirection is real. cache_seqlens
    (int32, on the device) is the keys cached per sequence; this class advances it after
    each step, as attention_with_kvcache leaves that to its caller. checked=False: the calls,
    the packed prefill's too (given the longest prompt, as FlashAttention's callers give
    it), never wait for the host (on CUDA; the CPU backends check host arrays anyway).
    """

    def __init__(self, model, prompts, new_tokens, page_size=None, checked=True, seed=0):
        layers, heads, head_dim, device, dtype = model_shape(model)
        self.model, self.checked = model, checked
        lengths = torch.tensor([len(p) for p in prompts])
        batch = len(prompts)
        # The last new token is never fed back, so the cache never holds it.
        self.longest = int(lengths.max())
        capacity = self.longest + new_tokens - 1
        sequence = torch.repeat_interleave(torch.arange(batch), lengths)
        position = torch.cat([torch.arange(n) for n in lengths.tolist()])
        if page_size is None:
            self.block_table = None
            slots, cache_rows = (sequence, position), (batch, capacity)
        else:
            pages = -(-capacity // page_size)
            order = torch.randperm(batch * pages, generator=torch.Generator().manual_seed(seed))
            table = order.view(batch, pages)
            slots = (table[sequence, position // page_size], position % page_size)
            cache_rows = (batch * pages, page_size)
            self.block_table = table.to(device, torch.int32)
        # Each packed token's (row, column) in a layer's cache: prefill writes them at once.
        self.slots = tuple(s.to(device) for s in slots)
        self.k_cache = torch.zeros(layers, *cache_rows, heads, head_dim, dtype=dtype,
                                   device=device)
        self.v_cache = torch.zeros_like(self.k_cache)
        self.lengths = lengths.to(device, torch.int32)
        self.cache_seqlens = torch.zeros_like(self.lengths)
        self.cu_seqlens = F.pad(lengths.cumsum(0), (1, 0)).to(device, torch.int32)
        self.last_rows = (self.cu_seqlens[1:] - 1).long()
        self.packed_tokens = torch.cat(prompts).to(device)
        self.packed_positions = position.to(device)
        # Written in place, so that a CUDA graph of step() leaves its results here too.
        self.tokens = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.logits = torch.zeros(batch, model.head.out_features, dtype=dtype, device=device)

    def prefill(self):
        self.cache_seqlens.copy_(self.lengths)
        logits = self.model(self.packed_tokens, self.packed_positions,
                            attention=self.packed_attention)
        self.logits.copy_(logits[self.last_rows])
        self.tokens.copy_(self.logits.argmax(-1, keepdim=True))

    def packed_attention(self, layer, q, k, v):
        """q, k, v (total, heads, head_dim): every prompt's tokens one after another."""
        self.k_cache[layer][self.slots] = k
        self.v_cache[layer][self.slots] = v
        return flashattn.varlen_attention(q, k, v, self.cu_seqlens, self.cu_seqlens,
                                          self.longest, self.longest, causal=True,
                                          checked=self.checked)

    def step(self):
        positions = self.cache_seqlens[:, None].long()
        logits = self.model(self.tokens, positions, attention=self.cached_attention)
        self.cache_seqlens += 1
        self.logits.copy_(logits[:, 0])
        self.tokens.copy_(logits.argmax(-1))

    def cached_attention(self, layer, q, k, v):
        """q, k, v (batch, 1, heads, head_dim): the step's token of each sequence; k and v
        go into the cache at row cache_seqlens[b] before the attention reads it."""
        return flashattn.attention_with_kvcache(
            q, self.k_cache[layer], self.v_cache[layer], k, v, self.cache_seqlens,
            self.block_table, causal=True, checked=self.checked)


class PaddedDecoder:
    """PyTorch's SDPA: a left-padded batch and a dense cache (layers, batch, heads,
    capacity, head_dim) that every sequence fills from column 0, padding first. Left
    padding puts every prompt's last token in the last column, so the steps append at one
    column for all; the mask hides the padding columns from every real query."""

    def __init__(self, model, prompts, new_tokens):
        layers, heads, head_dim, device, dtype = model_shape(model)
        self.model = model
        lengths = torch.tensor([len(p) for p in prompts])
        self.longest = int(lengths.max())
        capacity = self.longest + new_tokens - 1
        padding = self.longest - lengths
        column = torch.arange(capacity)
        self.valid = (column >= padding[:, None]).to(device)  # (batch, capacity)
        tokens = torch.zeros(len(prompts), self.longest, dtype=torch.long)
        for b, prompt in enumerate(prompts):
            tokens[b, padding[b]:] = prompt
        self.prompt_tokens = tokens.to(device)
        positions = column[:self.longest] - padding[:, None]  # negative on the padding
        self.prompt_positions = positions.clamp(min=0).to(device)
        causal = torch.ones(self.longest, self.longest, dtype=torch.bool,
                            device=device).tril()
        # A padding query sees itself only: a row with no key would come out NaN, and the
        # NaN would reach the next layer's keys through that row.
        itself = torch.eye(self.longest, dtype=torch.bool, device=device)
        self.prefill_mask = (causal & (self.valid[:, None, :self.longest] | itself))[:, None]
        self.k_cache = torch.zeros(layers, len(prompts), heads, capacity, head_dim,
                                   dtype=dtype, device=device)
        self.v_cache = torch.zeros_like(self.k_cache)
        self.next_positions = lengths[:, None].to(device)

    def prefill(self):
        self.used, self.positions = self.longest, self.next_positions.clone()
        logits = self.model(self.prompt_tokens, self.prompt_positions,
                            attention=self.padded_attention)
        self.logits = logits[:, -1]
        self.tokens = logits[:, -1:].argmax(-1)

    def padded_attention(self, layer, q, k, v):
        """q, k, v (batch, longest, heads, head_dim)."""
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        self.k_cache[layer][:, :, :self.longest] = k
        self.v_cache[layer][:, :, :self.longest] = v
        return F.scaled_dot_product_attention(q, k, v,
                                              attn_mask=self.prefill_mask).transpose(1, 2)

    def step(self):
        logits = self.model(self.tokens, self.positions, attention=self.cached_attention)
        self.used += 1
        self.positions += 1
        self.logits = logits[:, 0]
        self.tokens = logits.argmax(-1)

    def cached_attention(self, layer, q, k, v):
        """q, k, v (batch, 1, heads, head_dim), the new k and v written at column `used`."""
        k_cache, v_cache = self.k_cache[layer], self.v_cache[layer]
        k_cache[:, :, self.used] = k[:, 0]
        v_cache[:, :, self.used] = v[:, 0]
        keys = self.used + 1
        return F.scaled_dot_product_attention(
            q.transpose(1, 2), k_cache[:, :, :keys], v_cache[:, :, :keys],
            attn_mask=self.valid[:, None, None, :keys]).transpose(1, 2)
