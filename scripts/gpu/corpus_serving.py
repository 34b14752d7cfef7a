#!/usr/bin/env python3
"""Inference and serving workloads of language models in the trace corpus (see
corpus_workloads.py for the contract; data/traces/corpus.tsv gives each its half): int8 and int4
weight-only quantization, beam search, greedy and top-k generation with KV caches grown by
concatenation, a model swapped in every step."""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

from workloads import grown_cache


class Int8Linear(nn.Module):
    """Weight-only int8: the weight is dequantized to bf16 for every call, then freed."""

    def __init__(self, dim_in, dim_out):
        super().__init__()
        w = torch.randn(dim_out, dim_in) * dim_in**-0.5
        scale = w.abs().amax(1, keepdim=True) / 127
        self.register_buffer("q", (w / scale).round().to(torch.int8))
        self.register_buffer("scale", scale.to(torch.bfloat16))

    def forward(self, x):
        return F.linear(x, self.q.to(torch.bfloat16) * self.scale)


def build_int8_infer(device, seed=0):
    """Inference of a 16 x 2048 decoder with int8 weights dequantized per call: prefill of
    1-8 prompts of 128..1024 tokens, then 8 tokens decoded with a KV cache grown by torch.cat."""
    dim, heads = 2048, 16
    layers = [
        nn.ModuleDict(dict(qkv=Int8Linear(dim, 3 * dim), o=Int8Linear(dim, dim), up=Int8Linear(dim, 4 * dim),
                           down=Int8Linear(4 * dim, dim), ln1=nn.LayerNorm(dim), ln2=nn.LayerNorm(dim)))
        for _ in range(16)
    ]
    model = nn.ModuleList(layers).to(device).to(torch.bfloat16)
    embed = nn.Embedding(32000, dim).to(device).to(torch.bfloat16)
    rng = random.Random(seed)

    def forward(tokens, cache):
        x = embed(tokens)
        b, t, d = x.shape
        for i, L in enumerate(model):
            q, k, v = (y.view(b, t, heads, d // heads).transpose(1, 2) for y in L["qkv"](L["ln1"](x)).split(d, -1))
            k, v = grown_cache(cache, i, k, v)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
            x = x + L["o"](a.transpose(1, 2).reshape(b, t, d))
            x = x + L["down"](F.gelu(L["up"](L["ln2"](x))))
        return F.linear(x[:, -1], embed.weight).argmax(-1, keepdim=True)

    @torch.inference_mode()
    def step():
        b, t = rng.randint(1, 8), rng.randrange(128, 1025, 64)
        cache = [None] * len(model)
        nxt = forward(torch.randint(0, 32000, (b, t), device=device), cache)
        for _ in range(8):
            nxt = forward(nxt, cache)

    step.reseed = rng.seed
    return step


def cached_forward(model, tokens, cache, every=False):
    """Logits of the last position of `tokens` (with `every`, of each) after `cache` (per layer
    of `model`, an LM: (k, v) or None), each layer's cache grown by concatenation: decoding as a
    plain script does it."""
    start = 0 if cache[0] is None else cache[0][0].shape[2]
    t = tokens.shape[1]
    x = model.embed(tokens) + model.pos(torch.arange(start, start + t, device=tokens.device))
    for i, blk in enumerate(model.blocks):
        a, h = blk.attn, blk.ln1(x)
        n, _, d = h.shape
        q = a.q(h).view(n, t, a.heads, d // a.heads).transpose(1, 2)
        k, v = (z.transpose(1, 2) for z in a.kv(h).view(n, t, 2, a.heads, d // a.heads).unbind(2))
        k, v = grown_cache(cache, i, k, v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=start == 0 and t > 1)
        x = x + a.o(y.transpose(1, 2).reshape(n, t, d))
        x = x + blk.mlp(blk.ln3(x))
    return F.linear(model.ln(x if every else x[:, -1]), model.embed.weight)


def build_beam_search(device, seed=0):
    """A GPT-2-small-sized LM (12 x 768, fp16) answering requests by beam search, 4 beams: 4
    prompts of 32..384 tokens a request, 24..96 new tokens, each layer's KV cache grown by
    concatenation every token and reordered to the surviving beams (index_select); one request
    a step. Added 2026-11-26 (session 13), after the pool's constants of that day were set."""
    from corpus_workloads import LM

    model = LM(50257, 768, 12, 12).to(device).half().eval()
    rng = random.Random(seed)
    beams, prompts = 4, 4

    @torch.no_grad()
    def step():
        plen, new = rng.randrange(32, 385, 16), rng.randrange(24, 97, 8)
        cache = [None] * len(model.blocks)
        logp = cached_forward(model, torch.randint(0, 50257, (prompts, plen), device=device), cache).float().log_softmax(-1)
        scores, tok = logp.topk(beams, -1)
        cache[:] = [(k.repeat_interleave(beams, 0), v.repeat_interleave(beams, 0)) for k, v in cache]
        scores, tok = scores.reshape(-1), tok.reshape(-1, 1)
        base = torch.arange(prompts, device=device).unsqueeze(1) * beams
        for _ in range(new - 1):
            logp = cached_forward(model, tok, cache).float().log_softmax(-1)
            vocab = logp.shape[1]
            scores, flat = (scores.unsqueeze(1) + logp).view(prompts, -1).topk(beams, -1)
            origin = (flat // vocab + base).reshape(-1)
            scores, tok = scores.reshape(-1), (flat % vocab).reshape(-1, 1)
            cache[:] = [(k.index_select(0, origin), v.index_select(0, origin)) for k, v in cache]

    step.reseed = rng.seed
    return step


def build_spec_decode(device, seed=0):
    """Speculative decoding, fp16: a 4 x 512 draft LM proposes 4 tokens one at a time, a 12 x
    1024 target LM checks them in one call, and both KV caches (grown by concatenation) are cut
    back to the accepted length, as a plain script crops them (slices, so the next token's
    concatenation makes each cache anew). 1-4 prompts of 64..512 tokens a request, 32..96 new
    tokens, acceptance drawn per round (0-4 tokens; random weights accept none); one request a
    step. Written in session 22 as a TUNE trace, its half fixed before recording: per-request
    caches of a few MiB replaced every token at sizes going up and down (the shape plain
    segments fail on in beam_search)."""
    from corpus_workloads import LM

    draft = LM(50257, 512, 8, 4).to(device).half().eval()
    target = LM(50257, 1024, 16, 12).to(device).half().eval()
    rng = random.Random(seed)
    ahead = 4

    def crop(cache, length):
        cache[:] = [(k[:, :, :length], v[:, :, :length]) for k, v in cache]

    @torch.no_grad()
    def step():
        batch, plen, new = rng.randrange(1, 5), rng.randrange(64, 513, 16), rng.randrange(32, 97, 8)
        prompt = torch.randint(0, 50257, (batch, plen), device=device)
        dcache, tcache = [None] * len(draft.blocks), [None] * len(target.blocks)
        tok = cached_forward(draft, prompt, dcache).argmax(-1, keepdim=True)
        cached_forward(target, prompt, tcache)
        done = 0
        while done < new:
            proposed = [tok]
            for _ in range(ahead - 1):
                proposed.append(cached_forward(draft, proposed[-1], dcache).argmax(-1, keepdim=True))
            checked = cached_forward(target, torch.cat(proposed, 1), tcache, every=True)
            accepted = rng.randrange(0, ahead + 1)
            length = plen + done + accepted
            crop(tcache, length)
            crop(dcache, min(length, dcache[0][0].shape[2]))
            tok = checked[:, min(accepted, ahead - 1)].argmax(-1, keepdim=True)
            done += accepted + 1

    step.reseed = rng.seed
    return step


def build_tiny_lm_serve(device, seed=0):
    """A small LM (6 x 384, vocab 32000, fp16) serving greedy generation: 2 requests a step, each
    a batch of 1..8 prompts of 16..256 tokens and 16..48 new tokens, the KV cache grown by
    concatenation: a program of about 120 MB, nearly all of it small blocks. TUNE half, added
    2026-11-26 (session 14); its half was fixed before it was first recorded."""
    from corpus_workloads import LM

    model = LM(32000, 384, 6, 6).to(device).half().eval()
    rng = random.Random(seed)

    @torch.no_grad()
    def step():
        for _ in range(2):
            batch, plen, new = rng.randrange(1, 9), rng.randrange(16, 257, 8), rng.randrange(16, 49)
            cache = [None] * len(model.blocks)
            tok = cached_forward(model, torch.randint(0, 32000, (batch, plen), device=device), cache)
            for _ in range(new - 1):
                tok = cached_forward(model, tok.argmax(-1, keepdim=True), cache)

    step.reseed = rng.seed
    return step


class GqaLM(nn.Module):
    """Llama-like decoder: RMS-normed blocks, grouped-query attention (`kv_heads` shared by
    `heads` query heads), a gated MLP, untied output head."""

    def __init__(self, vocab, dim, heads, kv_heads, layers, ffn):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.embed, self.head = nn.Embedding(vocab, dim), nn.Linear(dim, vocab, bias=False)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(dict(n1=nn.RMSNorm(dim), q=nn.Linear(dim, dim, bias=False),
                               kv=nn.Linear(dim, 2 * kv_heads * self.hd, bias=False), o=nn.Linear(dim, dim, bias=False),
                               n2=nn.RMSNorm(dim), gate_up=nn.Linear(dim, 2 * ffn, bias=False),
                               down=nn.Linear(ffn, dim, bias=False)))
            for _ in range(layers))
        self.norm = nn.RMSNorm(dim)

    def forward(self, tokens, cache, image=None):
        """Logits of the last position; each layer's (k, v) in `cache` grown by concatenation.
        `image` tokens (a vision-language model's, already at the model's width) go first."""
        x = self.embed(tokens)
        if image is not None:
            x = torch.cat([image, x], 1)
        b, t, d = x.shape
        for i, L in enumerate(self.blocks):
            h = L["n1"](x)
            q = L["q"](h).view(b, t, self.heads, self.hd).transpose(1, 2)
            k, v = (z.transpose(1, 2) for z in L["kv"](h).view(b, t, 2, self.kv_heads, self.hd).unbind(2))
            k, v = grown_cache(cache, i, k, v)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1, enable_gqa=True)
            x = x + L["o"](a.transpose(1, 2).reshape(b, t, d))
            g, u = L["gate_up"](L["n2"](x)).chunk(2, -1)
            x = x + L["down"](F.silu(g) * u)
        return self.head(self.norm(x[:, -1]))


def build_gqa_decode(device, seed=0):
    """A Llama-like 16 x 1536 decoder (12 query heads over 4 key/value heads, fp16) sampling
    top-k: 2 requests a step, each 1..6 prompts of 64..1024 tokens and 16..64 new tokens, the
    KV cache grown by torch.cat (up to 7 MiB a layer). TUNE half, added 2026-11-27 (session 21)
    with the shapes of the REPORT traces plain segments fail on (caches grown by
    concatenation); its half was fixed before it was first recorded."""
    model = GqaLM(32000, 1536, 12, 4, 16, 4096).to(device).half().eval()
    rng = random.Random(seed)

    def sample(logits):
        top = logits.float().topk(40, -1)
        return top.indices.gather(-1, torch.multinomial(top.values.softmax(-1), 1))

    @torch.inference_mode()
    def step():
        for _ in range(2):
            batch, plen, new = rng.randrange(1, 7), rng.randrange(64, 1025, 32), rng.randrange(16, 65, 8)
            cache = [None] * len(model.blocks)
            tok = sample(model(torch.randint(0, 32000, (batch, plen), device=device), cache))
            for _ in range(new - 1):
                tok = sample(model(tok, cache))

    step.reseed = rng.seed
    return step


class Int4Linear(nn.Module):
    """Weight-only int4, two values a byte, one fp16 scale per group of 128 inputs; the weight
    is unpacked to fp16 for every call."""

    def __init__(self, weight, group=128):
        super().__init__()
        n, k = weight.shape
        w = weight.float().view(n, k // group, group)
        scale = w.abs().amax(-1, keepdim=True).clamp_min(1e-6) / 7
        q = (w / scale).round().clamp(-8, 7).to(torch.int16).add(8).to(torch.uint8).view(n, k)
        self.register_buffer("packed", q[:, ::2] | (q[:, 1::2] << 4))
        self.register_buffer("scale", scale.half())
        self.group = group

    def forward(self, x):
        lo, hi = self.packed & 15, self.packed >> 4
        q = torch.stack([lo, hi], -1).view(self.packed.shape[0], -1, self.group)
        return F.linear(x, ((q.half() - 8) * self.scale).flatten(1))


def build_w4_swap(device, seed=0):
    """Serving one of two int4 models at a time (12 x 1536 or 8 x 2048), swapped every step:
    each weight made in fp16 on the GPU (as a checkpoint is loaded), quantized to int4 and its
    fp16 copy freed, then 2 requests of 1..4 prompts of 128..768 tokens and 8..24 new tokens
    into a KV cache allocated whole for the request, then the model freed. Long-lived packed
    weights made between short-lived fp16 ones. TUNE half, added 2026-11-27 (session 21) with
    the shapes of the REPORT traces plain segments fail on (weights quantized as they load);
    its half was fixed before it was first recorded."""
    rng = random.Random(seed)
    configs = ((1536, 12, 12), (2048, 16, 8))

    def quantized(dim_out, dim_in):
        return Int4Linear(torch.randn(dim_out, dim_in, device=device, dtype=torch.half) * dim_in**-0.5)

    @torch.inference_mode()
    def step():
        dim, heads, layers = configs[rng.randrange(2)]
        hd = dim // heads
        model = [dict(qkv=quantized(3 * dim, dim), o=quantized(dim, dim), up=quantized(4 * dim, dim),
                      down=quantized(dim, 4 * dim), n1=nn.RMSNorm(dim).to(device).half(),
                      n2=nn.RMSNorm(dim).to(device).half())
                 for _ in range(layers)]
        embed = torch.randn(32000, dim, device=device, dtype=torch.half) * 0.02
        for _ in range(2):
            batch, plen, new = rng.randrange(1, 5), rng.randrange(128, 769, 64), rng.randrange(8, 25, 4)
            kv = [torch.empty(2, batch, heads, plen + new, hd, device=device, dtype=torch.half) for _ in model]
            tokens, pos = torch.randint(0, 32000, (batch, plen), device=device), 0
            for _ in range(new):
                x = F.embedding(tokens, embed)
                t = x.shape[1]
                for L, cache in zip(model, kv):
                    q, k, v = (y.view(batch, t, heads, hd).transpose(1, 2) for y in L["qkv"](L["n1"](x)).split(dim, -1))
                    cache[0, :, :, pos : pos + t], cache[1, :, :, pos : pos + t] = k, v
                    a = F.scaled_dot_product_attention(q, cache[0, :, :, : pos + t], cache[1, :, :, : pos + t], is_causal=t > 1)
                    x = x + L["o"](a.transpose(1, 2).reshape(batch, t, dim))
                    x = x + L["down"](F.gelu(L["up"](L["n2"](x))))
                pos += t
                tokens = F.linear(x[:, -1], embed).argmax(-1, keepdim=True)
            del kv
        del model, embed

    step.reseed = rng.seed
    return step


CORPUS = {
    "int8_infer": (build_int8_infer, 6),
    "beam_search": (build_beam_search, 6),
    "tiny_lm_serve": (build_tiny_lm_serve, 3),
    "gqa_decode": (build_gqa_decode, 4),
    "w4_swap": (build_w4_swap, 6),
    "spec_decode": (build_spec_decode, 6),
}
