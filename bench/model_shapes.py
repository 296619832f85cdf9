"""The model-shape grids' problems: attention layers of models people run, each with its
real batch, sequence length, query and kv heads, head_dim, dtype and mask, named by the
model and the layer so that a table row answers "is it faster for my model?".

Heads are per GPU: a model served with tensor parallelism over 8 GPUs ("TP8") runs 1/8 of
its query and kv heads on each. DeepSeek's multi-head latent attention (MLA) prefills and
trains on k and v decompressed from the latent, one of each per query head: q and k of
head_dim 192 (128 plus 64 of rotary position), v of 128, so out has 128 too. Sequence
lengths are the ones the model sees, so most are not multiples of 128: prompts of any
length, an image's patches plus a class token, a video's latent patches plus the text
tokens of joint attention ("4096+512"). Diffusion batches are 2 where classifier-free
guidance runs the conditional and unconditional passes together, 1 for guidance-distilled
models (FLUX.1, HunyuanVideo). Pure data, no torch.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    """One attention layer as the model runs it: q (batch, seqlen, heads, head_dim); k and
    v with heads_kv heads (grouped-query attention where fewer), v with head_dim_v where it
    differs from q's and k's head_dim (None: head_dim); causal: top-left, as PyTorch's
    is_causal."""

    name: str
    dtype: str
    batch: int
    seqlen: int
    heads: int
    heads_kv: int
    head_dim: int
    causal: bool
    head_dim_v: int = None


# Forward, "models". Decoder LLMs prefill a prompt: causal, bf16, the model's kv heads.
LLM_PREFILL = (
    # Llama 3: 8 kv heads; 3.2-1B head_dim 64 (2048 / 32), the others 128.
    Layer("Llama-3.2-1B prefill 16×1000", "bf16", 16, 1000, 32, 8, 64, True),
    Layer("Llama-3.2-1B prefill 32k", "bf16", 1, 32768, 32, 8, 64, True),
    Layer("Llama-3.2-3B prefill 2×2500", "bf16", 2, 2500, 24, 8, 128, True),
    Layer("Llama-3-8B prompts 32×200", "bf16", 32, 200, 32, 8, 128, True),
    Layer("Llama-3-8B prefill 8×512", "bf16", 8, 512, 32, 8, 128, True),
    Layer("Llama-3-8B prefill 4096", "bf16", 1, 4096, 32, 8, 128, True),
    Layer("Llama-3-8B prefill 8192", "bf16", 1, 8192, 32, 8, 128, True),
    Layer("Llama-3.1-8B prefill 32k", "bf16", 1, 32768, 32, 8, 128, True),
    Layer("Llama-3-70B TP8 prefill 8192", "bf16", 1, 8192, 8, 1, 128, True),
    Layer("Llama-3.1-405B TP8 prefill 16k", "bf16", 1, 16384, 16, 1, 128, True),
    # Qwen2.5: 14/2 heads of 64 (0.5B), 12/2 of 128 (1.5B), 28/4 of 128 (7B).
    Layer("Qwen2.5-0.5B prefill 4×1500", "bf16", 4, 1500, 14, 2, 64, True),
    Layer("Qwen2.5-1.5B prefill 4×2048", "bf16", 4, 2048, 12, 2, 128, True),
    Layer("Qwen2.5-7B prefill 4×3000", "bf16", 4, 3000, 28, 4, 128, True),
    Layer("Qwen2.5-7B prefill 15000", "bf16", 1, 15000, 28, 4, 128, True),
    # Gemma 3's global layers (the local ones are a 1024-key sliding window).
    Layer("Gemma-3-12B global layer 8192", "bf16", 1, 8192, 16, 8, 256, True),
    Layer("Gemma-3-12B global layer, prompt 500", "bf16", 1, 500, 16, 8, 256, True),
    Layer("Phi-3-mini prefill 4×2000", "bf16", 4, 2000, 32, 32, 96, True),
    Layer("Falcon-7B prefill 2×2048 (MQA)", "bf16", 2, 2048, 71, 1, 64, True),
    Layer("StarCoder2-15B prefill 16k", "bf16", 1, 16384, 48, 4, 128, True),
    # DeepSeek's MLA: 128 heads in V3 (16 a GPU at TP8), 16 in V2-Lite; q, k 192, v 128.
    Layer("DeepSeek-V3 TP8 MLA prefill 4096", "bf16", 1, 4096, 16, 16, 192, True, 128),
    Layer("DeepSeek-V3 TP8 MLA prefill 16k", "bf16", 1, 16384, 16, 16, 192, True, 128),
    Layer("DeepSeek-V2-Lite MLA prefill 4×2000", "bf16", 4, 2000, 16, 16, 192, True, 128),
    # Small GPTs in fp16, many short sequences.
    Layer("GPT-2-medium 64×256", "f16", 64, 256, 16, 16, 64, True),
    Layer("GPT-2 (124M) 12×1024", "bf16", 12, 1024, 12, 12, 64, True),
)

# Encoders: bidirectional, fp16 inference.
ENCODERS = (
    Layer("BERT-base 32×512", "f16", 32, 512, 12, 12, 64, False),
    Layer("BERT-base 256×128", "f16", 256, 128, 12, 12, 64, False),
    Layer("Whisper-large-v3 encoder 8×1500", "f16", 8, 1500, 20, 20, 64, False),
    Layer("HuBERT-large 20 s 8×999", "f16", 8, 999, 16, 16, 64, False),
)

# Vision transformers: patches (plus a class token where the model has one).
VISION = (
    Layer("ViT-B/16 224px 256×197", "bf16", 256, 197, 12, 12, 64, False),
    Layer("CLIP ViT-L/14 336px 32×577", "f16", 32, 577, 16, 16, 64, False),
    Layer("SigLIP-so400m 384px 32×729 (d72)", "bf16", 32, 729, 16, 16, 72, False),
    Layer("Qwen2-VL ViT 448px 16×1024 (d80)", "bf16", 16, 1024, 16, 16, 80, False),
    Layer("InternViT-6B 448px 8×1025", "bf16", 8, 1025, 25, 25, 128, False),
    Layer("DINOv2 ViT-g/14 518px 8×1370", "bf16", 8, 1370, 24, 24, 64, False),
    Layer("SAM ViT-H global 4×4096 (d80)", "bf16", 4, 4096, 16, 16, 80, False),
)

# Image and video diffusion: the self-attention of U-Nets (head_dim 40-160 at SD-1.5's
# three resolutions) and the joint attention of DiTs and MMDiTs.
DIFFUSION = (
    Layer("SD-1.5 U-Net 64×64 (4096, d40)", "f16", 2, 4096, 8, 8, 40, False),
    Layer("SD-1.5 U-Net 32×32 (1024, d80)", "f16", 2, 1024, 8, 8, 80, False),
    Layer("SD-1.5 U-Net 16×16 (256, d160)", "f16", 2, 256, 8, 8, 160, False),
    Layer("SD-2.1 U-Net 96×96 (9216)", "f16", 2, 9216, 5, 5, 64, False),
    Layer("SDXL U-Net 64×64 (4096)", "f16", 2, 4096, 10, 10, 64, False),
    Layer("DiT-XL/2 512px (1024, d72)", "bf16", 2, 1024, 16, 16, 72, False),
    Layer("PixArt-α 1024px (4096, d72)", "bf16", 2, 4096, 16, 16, 72, False),
    Layer("SD3.5-large 1024px (4096+333)", "bf16", 2, 4429, 38, 38, 64, False),
    Layer("FLUX.1 1024px (4096+512)", "bf16", 1, 4608, 24, 24, 128, False),
    Layer("FLUX.1 2048px (16384+512)", "bf16", 1, 16896, 24, 24, 128, False),
    Layer("CogVideoX-5B 49 frames (17550+226)", "bf16", 2, 17776, 48, 48, 64, False),
    Layer("Wan2.1-1.3B 480p 81 frames (32760)", "bf16", 1, 32760, 12, 12, 128, False),
    Layer("Wan2.1-14B 720p 81 frames (75600)", "bf16", 1, 75600, 40, 40, 128, False),
    Layer("HunyuanVideo 720p 129 frames (118800+256)", "bf16", 1, 119056, 24, 24, 128,
          False),
)

FORWARD = LLM_PREFILL + ENCODERS + VISION + DIFFUSION

# Forward and backward, "models_bwd": a training step's attention.
TRAINING = (
    Layer("Llama-3-8B training 8192", "bf16", 1, 8192, 32, 8, 128, True),
    Layer("Llama-3.2-1B training 4×2048", "bf16", 4, 2048, 32, 8, 64, True),
    Layer("Qwen2.5-7B fine-tuning 4×3000", "bf16", 4, 3000, 28, 4, 128, True),
    Layer("Gemma-3-12B global layer training 8192", "bf16", 1, 8192, 16, 8, 256, True),
    Layer("DeepSeek-V3 TP8 MLA fine-tuning 4096", "bf16", 1, 4096, 16, 16, 192, True, 128),
    Layer("DeepSeek-V2-Lite MLA fine-tuning 4×2000", "bf16", 4, 2000, 16, 16, 192, True,
          128),
    Layer("GPT-2 (124M) training 12×1024", "bf16", 12, 1024, 12, 12, 64, True),
    Layer("CLIP ViT-L/14 224px training 64×257", "bf16", 64, 257, 16, 16, 64, False),
    Layer("SigLIP-so400m 384px training 32×729", "bf16", 32, 729, 16, 16, 72, False),
    Layer("DiT-XL/2 256px training 256×256", "bf16", 256, 256, 16, 16, 72, False),
    Layer("FLUX.1 1024px fine-tuning (4096+512)", "bf16", 1, 4608, 24, 24, 128, False),
)

# Points a user measured flashattn losing at: the report marks them.
REPORTED_SLOW = ("GPT-2-medium 64×256", "FLUX.1 1024px (4096+512)",
                 "Qwen2.5-7B prefill 4×3000")

# --quick: the reported points and one long prefill; one training step.
QUICK_FORWARD = REPORTED_SLOW + ("Llama-3-8B prefill 8192",)
QUICK_TRAINING = ("Llama-3-8B training 8192",)
