#!/usr/bin/env python3
"""Step functions of the overhead benchmark (overhead.py): plain PyTorch programs that know
nothing of any allocator. Each `build_*` returns a function that runs one step and returns
nothing; the caller times it. Seeds are fixed, so every process runs the same sequence of
shapes and the runs with and without the shim do the same work; `step.reseed(n)` starts the
sequence of shapes again from seed n, and any schedule the steps keep (every k-th step
evaluates, say) with it (overhead.py --in-process times the same sequence in both halves of a
pair).

- gpt2, resnet50: the training steps of train.py (cache-friendly, compute-bound).
- decode: small-batch autoregressive decoding with variable prompt and output lengths and a
  KV cache that grows by torch.cat every token: launch-bound, hundreds of small allocations a
  step, the workload where a per-call cost of the shim shows first.
- moe: a mixture-of-experts layer stack, training, with expert token counts that change every
  step (the shapes an allocator sees change every step).
- unet: a small diffusion UNet trained at a resolution that changes every step (256..512).
- lora: LoRA fine-tuning of a 12-layer transformer with activation checkpointing, at a sequence
  length that changes every step.
"""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F


def grown_cache(cache, i, k, v):
    """Layer `i`'s keys and values with `k` and `v` appended along the sequence, kept in `cache`
    (a list of (k, v) or None per layer): a KV cache grown by concatenation, as a plain decoding
    script grows it, so every token replaces each layer's cache with a larger one."""
    if cache[i] is not None:
        k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
    cache[i] = (k, v)
    return k, v


class Decoder(nn.Module):
    """A GPT-style decoder with an explicit KV cache, written out so nothing but torch is needed."""

    def __init__(self, vocab=8192, dim=512, heads=8, layers=8):
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, dim)
        self.qkv = nn.ModuleList(nn.Linear(dim, 3 * dim) for _ in range(layers))
        self.out = nn.ModuleList(nn.Linear(dim, dim) for _ in range(layers))
        self.mlp = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)) for _ in range(layers)
        )
        self.norm1 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.norm2 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens, cache):
        x = self.embed(tokens)
        b, t, d = x.shape
        h = self.heads
        for i in range(len(self.qkv)):
            q, k, v = self.qkv[i](self.norm1[i](x)).split(d, dim=-1)
            q, k, v = (y.view(b, t, h, d // h).transpose(1, 2) for y in (q, k, v))
            k, v = grown_cache(cache, i, k, v)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=cache[i][0].shape[2] == t and t > 1)
            x = x + self.out[i](a.transpose(1, 2).reshape(b, t, d))
            x = x + self.mlp[i](self.norm2[i](x))
        return self.head(x[:, -1])


def build_decode(device, seed=0):
    model = Decoder().to(device).eval().half()
    rng = random.Random(seed)

    @torch.inference_mode()
    def step():
        batch = rng.choice((1, 2, 4))
        prompt = rng.randint(16, 128)
        new = rng.randint(8, 40)
        tokens = torch.randint(0, 8192, (batch, prompt), device=device)
        cache = [None] * len(model.qkv)
        logits = model(tokens, cache)
        for _ in range(new):
            nxt = logits.argmax(-1, keepdim=True)
            logits = model(nxt, cache)

    step.reseed = rng.seed
    return step


class MoE(nn.Module):
    def __init__(self, dim=1024, experts=8, layers=4):
        super().__init__()
        self.router = nn.ModuleList(nn.Linear(dim, experts) for _ in range(layers))
        self.experts = nn.ModuleList(
            nn.ModuleList(nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)) for _ in range(experts))
            for _ in range(layers)
        )

    def forward(self, x, skew):
        for router, experts in zip(self.router, self.experts):
            # Top-1 routing with a per-step bias, so expert loads vary from step to step.
            choice = (router(x) + skew).argmax(-1)
            out = torch.zeros_like(x)
            for e, expert in enumerate(experts):
                idx = (choice == e).nonzero(as_tuple=True)[0]
                if idx.numel():
                    # Under autocast the expert answers in bf16; the sum stays in x's dtype.
                    out.index_add_(0, idx, expert(x.index_select(0, idx)).to(out.dtype))
            x = x + out
        return x


def build_moe(device, seed=0):
    model = MoE().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def step():
        tokens = int(torch.randint(2048, 8192, (1,), generator=gen))
        x = torch.randn(tokens, 1024, generator=gen).to(device)
        skew = (torch.randn(8, generator=gen) * 3).to(device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = model(x, skew)
        y.float().pow(2).mean().backward()
        opt.step()

    step.reseed = gen.manual_seed
    return step


class UNet(nn.Module):
    def __init__(self, ch=64):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.GroupNorm(8, o), nn.SiLU(), nn.Conv2d(o, o, 3, padding=1))

        self.d1, self.d2, self.d3 = block(4, ch), block(ch, 2 * ch), block(2 * ch, 4 * ch)
        self.u2, self.u1 = block(6 * ch, 2 * ch), block(3 * ch, ch)
        self.out = nn.Conv2d(ch, 4, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.avg_pool2d(a, 2))
        c = self.d3(F.avg_pool2d(b, 2))
        b = self.u2(torch.cat([F.interpolate(c, scale_factor=2), b], 1))
        return self.out(self.u1(torch.cat([F.interpolate(b, scale_factor=2), a], 1)))


def build_unet(device, seed=0):
    model = UNet().to(device, memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)

    def step():
        # Latents of 256..512 px images (VAE factor 8): 32..64, in steps of 8.
        side = rng.choice((32, 40, 48, 56, 64))
        x = torch.randn(8, 4, side, side, device=device).contiguous(memory_format=torch.channels_last)
        noise = torch.randn_like(x)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.mse_loss(model(x + noise).float(), noise)
        loss.backward()
        opt.step()

    step.reseed = rng.seed
    return step


class LoRALinear(nn.Module):
    """A frozen linear layer with a trainable low-rank update (LoRA)."""

    def __init__(self, dim_in, dim_out, rank=16):
        super().__init__()
        self.base = nn.Linear(dim_in, dim_out)
        self.base.requires_grad_(False)
        self.a = nn.Parameter(torch.randn(dim_in, rank) * 0.01)
        self.b = nn.Parameter(torch.zeros(rank, dim_out))

    def forward(self, x):
        return self.base(x) + (x @ self.a) @ self.b


class LoRABlock(nn.Module):
    def __init__(self, dim=1024, heads=16):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = LoRALinear(dim, 3 * dim), LoRALinear(dim, dim)
        self.up, self.down = LoRALinear(dim, 4 * dim), LoRALinear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


def build_lora(device, seed=0):
    """LoRA fine-tuning of a 12-layer transformer with activation checkpointing per layer, at a
    sequence length that changes every step (256..1024): recomputation in the backward pass
    allocates in a different order than the forward did."""
    from torch.utils.checkpoint import checkpoint

    blocks = nn.ModuleList(LoRABlock() for _ in range(12)).to(device)
    params = [p for p in blocks.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    rng = random.Random(seed)

    def step():
        t = rng.choice((256, 384, 512, 768, 1024))
        x = torch.randn(8, t, 1024, device=device, requires_grad=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            for blk in blocks:
                x = checkpoint(blk, x, use_reentrant=False)
        x.float().pow(2).mean().backward()
        opt.step()

    step.reseed = rng.seed
    return step


def build_train(model_name, device):
    """GPT-2 / ResNet-50 training steps from train.py."""
    import argparse

    import train

    args = argparse.Namespace(batch=None, seq=1024, image=224, tiny=False)
    build = train.gpt2_workload if model_name == "gpt2" else train.resnet50_workload
    model, optimizer, forward, loss_of, _ = build(args, device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = forward()
        loss_of(out).backward()
        optimizer.step()

    step.reseed = lambda seed: None  # one fixed batch: every step is the same
    return step


BUILDERS = {
    "gpt2": lambda d: build_train("gpt2", d),
    "resnet50": lambda d: build_train("resnet50", d),
    "decode": build_decode,
    "moe": build_moe,
    "unet": build_unet,
    "lora": build_lora,
}
