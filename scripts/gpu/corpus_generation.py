#!/usr/bin/env python3
"""Generation workloads of the trace corpus written in session 23 as TUNE traces, their half
fixed in data/traces/corpus.tsv before they were recorded (see corpus_workloads.py for the
contract): translation by beam search over an encoder-decoder, and a diffusion sampler whose
position tables are cached per resolution for the life of the program. Both carry shapes
plain segments fail on in REPORT traces (beam_search, unet_infer), as new programs."""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_vision import timestep_embedding
from workloads import grown_cache


def heads_of(x, heads):
    """(n, t, d) -> (n, heads, t, d / heads)."""
    n, t, d = x.shape
    return x.view(n, t, heads, d // heads).transpose(1, 2)


def decode_token(model, tok, pos, self_cache, cross):
    """Log-probabilities of the next token after `tok` (n x 1) at position `pos` for an
    EncDec's decoder: each layer's self-attention cache grown by concatenation, its
    cross-attention keys and values (`cross`, per layer) made once per sentence."""
    x = model.embed(tok) + model.pos(torch.full_like(tok, pos))
    for i, blk in enumerate(model.dec):
        a, h = blk.attn, blk.ln1(x)
        q = heads_of(a.q(h), a.heads)
        k, v = (heads_of(z, a.heads) for z in a.kv(h).chunk(2, -1))
        k, v = grown_cache(self_cache, i, k, v)
        y = F.scaled_dot_product_attention(q, k, v)
        x = x + a.o(y.transpose(1, 2).flatten(2))
        c = blk.cross
        y = F.scaled_dot_product_attention(heads_of(c.q(blk.ln2(x)), c.heads), *cross[i])
        x = x + c.o(y.transpose(1, 2).flatten(2))
        x = x + blk.mlp(blk.ln3(x))
    return F.linear(model.ln_dec(x[:, -1]), model.embed.weight).float().log_softmax(-1)


def build_nmt_beam(device, seed=0):
    """Translation by beam search, fp16: a Marian-like encoder-decoder (6 + 6 layers of 512, 8
    heads, vocab 32000), 2..8 source sentences of 16..256 tokens a request, 5 beams. Every
    token grows each layer's self-attention cache by concatenation and reorders it and the
    cross-attention keys and values to the surviving beams (index_select, as Hugging Face's
    `_reorder_cache` does); a sentence that reaches its length (0.8..1.3 of its source's, at
    most 160) leaves the batch, so every cache shrinks with it. One request a step."""
    from corpus_workloads import EncDec

    model = EncDec(32000, 512, 8, 6).to(device).half().eval()
    rng = random.Random(seed)
    beams = 5

    @torch.inference_mode()
    def step():
        b, src = rng.randint(2, 8), rng.randrange(16, 257, 8)
        lengths = [min(160, max(4, int(src * rng.uniform(0.8, 1.3)))) for _ in range(b)]
        enc = model.encode(model.embed(torch.randint(0, 32000, (b, src), device=device)))
        enc = enc.repeat_interleave(beams, 0)
        cross = []
        for blk in model.dec:
            k, v = blk.cross.kv(enc).chunk(2, -1)
            cross.append((heads_of(k, blk.cross.heads), heads_of(v, blk.cross.heads)))
        del enc
        cache = [None] * len(model.dec)
        scores = torch.zeros(b * beams, device=device)
        tok = torch.zeros(b * beams, 1, dtype=torch.long, device=device)
        active = list(range(b))
        for pos in range(max(lengths)):
            logp = decode_token(model, tok, pos, cache, cross)
            n, vocab = len(active), logp.shape[1]
            scores, flat = (scores.unsqueeze(1) + logp).view(n, -1).topk(beams, -1)
            base = torch.arange(n, device=device).unsqueeze(1) * beams
            origin = (flat // vocab + base).reshape(-1)
            scores, tok = scores.reshape(-1), (flat % vocab).reshape(-1, 1)
            keep = [j for j, s in enumerate(active) if lengths[s] > pos + 1]
            if not keep:
                break
            if len(keep) < n:
                rows = torch.tensor([j * beams + r for j in keep for r in range(beams)], device=device)
                origin, scores, tok = origin[rows], scores[rows], tok[rows]
                active = [active[j] for j in keep]
            cache[:] = [(k.index_select(0, origin), v.index_select(0, origin)) for k, v in cache]
            cross[:] = [(k.index_select(0, origin), v.index_select(0, origin)) for k, v in cross]

    step.reseed = rng.seed
    return step


def rotary(z, cos, sin):
    """`z` turned by rotary positions (its halves swapped, the first negated, as Llama does)."""
    return (z * cos) + (torch.cat([-z[..., z.shape[-1] // 2:], z[..., : z.shape[-1] // 2]], -1) * sin)


class RopeDiT(nn.Module):
    """A DiT-like denoiser (12 x 768, patch 2) with 2-D rotary positions: each (height, width)
    gets its cos and sin tables the first time it is seen, made inside the forward after the
    first block (where a model computes them lazily), and kept for the life of the program."""

    def __init__(self, dim=768, heads=12, layers=12, channels=4, patch=2):
        super().__init__()
        self.dim, self.heads, self.patch, self.channels = dim, heads, patch, channels
        self.embed = nn.Conv2d(channels, dim, patch, stride=patch)
        self.t_mlp = nn.Sequential(nn.Linear(256, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.ctx_proj = nn.Linear(1024, dim)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(dict(ln1=nn.LayerNorm(dim), qkv=nn.Linear(dim, 3 * dim), proj=nn.Linear(dim, dim),
                               ln2=nn.LayerNorm(dim), mlp=nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(),
                                                                         nn.Linear(4 * dim, dim)),
                               mod=nn.Linear(dim, 4 * dim)))
            for _ in range(layers)
        )
        self.out = nn.Linear(dim, patch * patch * channels)
        self.tables = {}

    def rope(self, hgt, wid, device, dtype):
        """cos and sin of shape (hgt * wid, head dim), made once per resolution."""
        key = (hgt, wid)
        if key not in self.tables:
            half = self.dim // self.heads // 4
            freqs = 1.0 / 10000 ** (torch.arange(half, device=device) / half)
            ys, xs = torch.meshgrid(torch.arange(hgt, device=device), torch.arange(wid, device=device), indexing="ij")
            ang = torch.cat([ys.flatten()[:, None] * freqs, xs.flatten()[:, None] * freqs], -1).repeat(1, 2)
            self.tables[key] = (ang.cos().to(dtype), ang.sin().to(dtype))
        return self.tables[key]

    def forward(self, x, t, ctx):
        b, c, hgt, wid = x.shape
        p = self.patch
        tokens = self.embed(x).flatten(2).transpose(1, 2)
        cond = self.t_mlp(timestep_embedding(t, 256).to(tokens.dtype)) + self.ctx_proj(ctx).mean(1)
        table = None
        for blk in self.blocks:
            s1, g1, s2, g2 = blk["mod"](F.silu(cond)).unsqueeze(1).chunk(4, -1)
            q, k, v = (heads_of(z, self.heads) for z in blk["qkv"](blk["ln1"](tokens) * (1 + g1) + s1).chunk(3, -1))
            if table is None:
                table = self.rope(hgt // p, wid // p, x.device, x.dtype)
            q, k = (rotary(z, *table) for z in (q, k))
            y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)
            tokens = tokens + blk["proj"](y)
            tokens = tokens + blk["mlp"](blk["ln2"](tokens) * (1 + g2) + s2)
        y = self.out(tokens).view(b, hgt // p, wid // p, p, p, c)
        return y.permute(0, 5, 1, 3, 2, 4).reshape(b, c, hgt, wid)


def build_rope_sampler(device, seed=0):
    """Text-to-image sampling, fp16, with a RopeDiT and classifier-free guidance (batch 2 per
    image): per step one image of a latent height and width of 32..96 px drawn apart (aspect
    ratios as users pick them), 8 Euler steps of a flow sampler. Its rotary tables, cached per
    resolution in the middle of a forward near the step's peak, are never freed."""
    model = RopeDiT().to(device).half().eval()
    rng = random.Random(seed)

    @torch.inference_mode()
    def step():
        hgt, wid = rng.randrange(32, 97, 8), rng.randrange(32, 97, 8)
        x = torch.randn(1, 4, hgt, wid, device=device, dtype=torch.half)
        ctx = torch.randn(2, 77, 1024, device=device, dtype=torch.half)
        for k in range(8):
            t = torch.full((2,), 1000 - 125 * k, device=device)
            v = model(torch.cat([x, x]), t, ctx)
            uncond, cond = v.chunk(2)
            x = x - 0.125 * (uncond + 5.0 * (cond - uncond))

    step.reseed = rng.seed
    return step


CORPUS = {
    "nmt_beam": (build_nmt_beam, 6),
    "rope_sampler": (build_rope_sampler, 8),
}
