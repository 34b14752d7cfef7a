#!/usr/bin/env python3
"""Workloads of the trace corpus recorded from the caching allocator's history: the REPORT half
(data/traces/corpus.tsv), written so that the pool's constants are never chosen on them, and
the TUNE traces added later (each says so; corpus.tsv is what decides a half). Language and
sequence models here, vision and staged pipelines in corpus_vision.py. Same contract as workloads.py: `build_<name>(device, seed=0)`
returns a function that runs one step; seeds are fixed, so every process of one workload runs
the same sequence of shapes. Models are built from configs with random weights (nothing is
downloaded). `CORPUS` maps each name to its builder and the number of steps a trace records.
"""

import os
import random
import socket

import torch
import torch.nn as nn
import torch.nn.functional as F

import corpus_vision


class Attention(nn.Module):
    """Multi-head attention; `ctx` given makes it cross-attention."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q, self.kv, self.o = nn.Linear(dim, dim), nn.Linear(dim, 2 * dim), nn.Linear(dim, dim)

    def forward(self, x, ctx=None, causal=False):
        b, t, d = x.shape
        ctx = x if ctx is None else ctx
        h = self.heads
        q = self.q(x).view(b, t, h, d // h).transpose(1, 2)
        k, v = self.kv(ctx).view(b, ctx.shape[1], 2, h, d // h).unbind(2)
        a = F.scaled_dot_product_attention(q, k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
        return self.o(a.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-norm transformer block, optionally with cross-attention (decoders of enc-dec models)."""

    def __init__(self, dim, heads, cross=False, ffn=4):
        super().__init__()
        self.ln1, self.ln3 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim) if cross else None
        self.cross = Attention(dim, heads) if cross else None
        self.mlp = nn.Sequential(nn.Linear(dim, ffn * dim), nn.GELU(), nn.Linear(ffn * dim, dim))

    def forward(self, x, ctx=None, causal=False):
        x = x + self.attn(self.ln1(x), causal=causal)
        if self.cross is not None:
            x = x + self.cross(self.ln2(x), ctx)
        return x + self.mlp(self.ln3(x))


class LM(nn.Module):
    """Decoder-only language model (GPT-2 layout, tied embeddings)."""

    def __init__(self, vocab, dim, heads, layers, ctx=1024):
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)

    def forward(self, tokens, checkpointed=False):
        from torch.utils.checkpoint import checkpoint

        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for blk in self.blocks:
            x = checkpoint(blk, x, None, True, use_reentrant=False) if checkpointed else blk(x, causal=True)
        return F.linear(self.ln(x), self.embed.weight)


def lm_loss(logits, tokens):
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten())


def build_gpt2m_accum(device, seed=0):
    """GPT-2 medium (24 x 1024, 355M parameters), 4 micro-batches of 4 accumulated per optimizer
    step, every block checkpointed, sequence length drawn per micro-batch from 256..1024."""
    model = LM(50304, 1024, 16, 24).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)

    def step():
        opt.zero_grad(set_to_none=True)
        for _ in range(4):
            t = rng.choice((256, 384, 512, 768, 1024))
            tokens = torch.randint(0, 50304, (4, t), device=device)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = lm_loss(model(tokens, checkpointed=True), tokens) / 4
            loss.backward()
        opt.step()

    step.reseed = rng.seed
    return step


class PagedServer:
    """Continuous batching: requests join (prefill) and leave (finished) between decode
    iterations; each request's per-layer K and V live in its own tensors, grown a page of tokens
    at a time (a new tensor one page larger, the old one copied and freed)."""

    PAGE = 64

    def __init__(self, device, seed, vocab=32000, dim=2048, heads=16, layers=6):
        self.device, self.heads, self.dim, self.vocab = device, heads, dim, vocab
        self.embed = nn.Embedding(vocab, dim).to(device).half()
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers)).to(device).half()
        self.rng = random.Random(seed)
        self.active = []  # [remaining tokens, length, [[K, V] per layer], last token]

    def grow(self, kv, length, extra):
        """Returns kv with room for length + extra tokens, a page at a time."""
        cap = kv[0].shape[2] if kv else 0
        if length + extra <= cap:
            return kv
        new_cap = (length + extra + self.PAGE - 1) // self.PAGE * self.PAGE
        h, hd = self.heads, self.dim // self.heads
        out = [torch.empty(1, h, new_cap, hd, device=self.device, dtype=torch.half) for _ in range(2)]
        if kv:
            for o, old in zip(out, kv):
                o[:, :, :length].copy_(old[:, :, :length])
        return out

    def layer(self, i, x, reqs, new):
        """One block over the rows of x (request r owns rows new[r] tokens long)."""
        blk = self.blocks[i]
        h, hd = self.heads, self.dim // self.heads
        y = blk.ln1(x)
        q = blk.attn.q(y)
        k, v = blk.attn.kv(y).chunk(2, dim=-1)
        outs, row = [], 0
        for r, n in zip(reqs, new):
            length = r[1]
            kv = r[2][i] = self.grow(r[2][i], length, n)
            kv[0][0, :, length : length + n] = k[row : row + n].view(n, h, hd).transpose(0, 1)
            kv[1][0, :, length : length + n] = v[row : row + n].view(n, h, hd).transpose(0, 1)
            qr = q[row : row + n].view(1, n, h, hd).transpose(1, 2)
            a = F.scaled_dot_product_attention(
                qr, kv[0][:, :, : length + n], kv[1][:, :, : length + n], is_causal=n > 1
            )
            outs.append(a.transpose(1, 2).reshape(n, self.dim))
            row += n
        x = x + blk.attn.o(torch.cat(outs))
        return x + blk.mlp(blk.ln3(x))

    def forward(self, reqs, tokens, new):
        x = self.embed(tokens)
        for i in range(len(self.blocks)):
            x = self.layer(i, x, reqs, new)
        for r, n in zip(reqs, new):
            r[1] += n
        ends = torch.tensor(new, device=self.device).cumsum(0) - 1
        return F.linear(x[ends], self.embed.weight).argmax(-1)

    @torch.inference_mode()
    def iteration(self):
        rng = self.rng
        for _ in range(rng.choice((0, 0, 1, 1, 2))):
            if len(self.active) < 24:
                prompt = rng.randint(32, 640)
                req = [rng.randint(16, 320), 0, [None] * len(self.blocks), None]
                tokens = torch.randint(0, self.vocab, (prompt,), device=self.device)
                req[3] = self.forward([req], tokens, [prompt])
                self.active.append(req)
        if not self.active:
            return
        tokens = torch.cat([r[3] for r in self.active])
        nxt = self.forward(self.active, tokens, [1] * len(self.active))
        for r, t in zip(self.active, nxt.split(1)):
            r[0] -= 1
            r[3] = t
        self.active = [r for r in self.active if r[0] > 0]


def build_serve_paged(device, seed=0):
    server = PagedServer(device, seed)
    rng = server.rng

    def step():
        for _ in range(20):
            server.iteration()

    step.reseed = rng.seed
    return step


class MoE2(nn.Module):
    """Transformer with top-2 routed MoE feed-forward layers (16 experts of 768 -> 2048)."""

    def __init__(self, dim=768, experts=16, ffn=2048, layers=3):
        super().__init__()
        self.attn = nn.ModuleList(Attention(dim, 12) for _ in range(layers))
        self.ln1 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.ln2 = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.router = nn.ModuleList(nn.Linear(dim, experts) for _ in range(layers))
        self.experts = nn.ModuleList(
            nn.ModuleList(nn.Sequential(nn.Linear(dim, ffn), nn.GELU(), nn.Linear(ffn, dim)) for _ in range(experts))
            for _ in range(layers)
        )

    def forward(self, x, skew):
        b, t, d = x.shape
        for i in range(len(self.attn)):
            x = x + self.attn[i](self.ln1[i](x), causal=True)
            y = self.ln2[i](x).reshape(b * t, d)
            gates, idx = (self.router[i](y).float() + skew).softmax(-1).topk(2, dim=-1)
            out = torch.zeros_like(y)
            for e, expert in enumerate(self.experts[i]):
                tok, slot = (idx == e).nonzero(as_tuple=True)
                if tok.numel():
                    g = gates[tok, slot].unsqueeze(1)
                    out.index_add_(0, tok, (expert(y.index_select(0, tok)) * g).to(out.dtype))
            x = x + out.view(b, t, d)
        return x


def build_moe_top2(device, seed=0):
    """Top-2 MoE training, 1-12 sequences of 512 a step, a Zipf-like router bias redrawn every
    step so a few experts take most tokens and which ones changes."""
    model = MoE2().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)

    def step():
        b = rng.randint(1, 12)
        ranks = list(range(16))
        rng.shuffle(ranks)
        skew = torch.tensor([3.0 / (1 + r) ** 0.8 for r in ranks], device=device)
        x = torch.randn(b, 512, 768, device=device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = model(x, skew)
        y.float().pow(2).mean().backward()
        opt.step()

    step.reseed = rng.seed
    return step


class EncDec(nn.Module):
    """Encoder-decoder transformer (T5 / Whisper layout, learned positions for brevity)."""

    def __init__(self, vocab, dim, heads, layers, ctx=4096):
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
        self.enc = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.dec = nn.ModuleList(Block(dim, heads, cross=True) for _ in range(layers))
        self.ln_enc, self.ln_dec = nn.LayerNorm(dim), nn.LayerNorm(dim)

    def encode(self, x):
        x = x + self.pos(torch.arange(x.shape[1], device=x.device))
        for blk in self.enc:
            x = blk(x)
        return self.ln_enc(x)

    def decode(self, tokens, ctx):
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for blk in self.dec:
            x = blk(x, ctx, causal=True)
        return F.linear(self.ln_dec(x), self.embed.weight)


def build_t5_encdec(device, seed=0):
    """T5-base-like (12 + 12 layers of 768, vocab 32128) translation training: source 64..512
    and target 16..192 tokens drawn every step, batch chosen to keep <= 8k source and <= 4k
    target tokens."""
    model = EncDec(32128, 768, 12, 12).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)

    def step():
        src = rng.randrange(64, 513, 16)
        tgt = rng.randrange(16, 193, 8)
        b = max(2, min(8192 // src, 4096 // tgt))
        s = torch.randint(0, 32128, (b, src), device=device)
        t = torch.randint(0, 32128, (b, tgt), device=device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lm_loss(model.decode(t, model.encode(model.embed(s))), t)
        loss.backward()
        opt.step()

    step.reseed = rng.seed
    return step


class Speech(EncDec):
    """Whisper-like: a two-convolution frontend (the second strides by 2) over 80 mel bins."""

    def __init__(self):
        super().__init__(51865, 512, 8, 6)
        self.conv1 = nn.Conv1d(80, 512, 3, padding=1)
        self.conv2 = nn.Conv1d(512, 512, 3, stride=2, padding=1)

    def audio(self, mel):
        return F.gelu(self.conv2(F.gelu(self.conv1(mel)))).transpose(1, 2)


def build_whisper(device, seed=0):
    """Whisper-base-like speech-to-text training: 5..30 s of audio a step (500..3000 mel frames),
    8 clips of one length, transcripts of 16..224 tokens."""
    model = Speech().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)

    def step():
        frames = rng.randrange(500, 3001, 100)
        tgt = rng.randrange(16, 225, 8)
        mel = torch.randn(8, 80, frames, device=device)
        t = torch.randint(0, 51865, (8, tgt), device=device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lm_loss(model.decode(t, model.encode(model.audio(mel))), t)
        loss.backward()
        opt.step()

    step.reseed = rng.seed
    return step


def build_bert_dynamic(device, seed=0):
    """BERT-base (12 x 768) masked-LM training on unpadded batches: sequence 32..512 and batch
    to ~12k tokens drawn every step, loss on a random 15% of positions (a gather whose size
    changes with the draw)."""
    model = nn.ModuleDict(
        dict(
            embed=nn.Embedding(30522, 768),
            pos=nn.Embedding(512, 768),
            blocks=nn.ModuleList(Block(768, 12) for _ in range(12)),
            ln=nn.LayerNorm(768),
        )
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)

    def step():
        t = rng.randrange(32, 513, 8)
        b = max(1, 12288 // t + rng.randint(-4, 4))
        tokens = torch.randint(0, 30522, (b, t), device=device)
        picked = (torch.rand(b, t, device=device) < 0.15).nonzero(as_tuple=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            x = model["embed"](tokens) + model["pos"](torch.arange(t, device=device))
            for blk in model["blocks"]:
                x = blk(x)
            logits = F.linear(model["ln"](x[picked]), model["embed"].weight)
        F.cross_entropy(logits.float(), tokens[picked]).backward()
        opt.step()

    step.reseed = rng.seed
    return step


def init_process_group():
    """World size 1 in this process: NCCL, or gloo where NCCL will not start."""
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    try:
        dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
        return "nccl"
    except Exception as e:  # noqa: BLE001 - any failure of NCCL falls back the same way
        print("NCCL failed, using gloo:", e, flush=True)
        dist.init_process_group("gloo", rank=0, world_size=1)
        return "gloo"


def build_ddp_buckets(device, seed=0):
    """DDP (world size 1, NCCL, 25 MiB gradient buckets) over a 12 x 768 language model, batch
    and sequence drawn every step: the reducer's bucket buffers live beside the gradients."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    backend = init_process_group()
    model = DDP(LM(32000, 768, 12, 12).to(device), device_ids=[0] if backend == "nccl" else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)

    def step():
        t = rng.choice((256, 512, 768, 1024))
        tokens = torch.randint(0, 32000, (max(2, 8192 // t), t), device=device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lm_loss(model(tokens), tokens)
        loss.backward()
        opt.step()

    step.reseed = rng.seed
    return step


def build_compiled_gpt(device, seed=0):
    """torch.compile (Inductor, default mode) of a 4 x 768 language model, training at one
    batch shape (16 x 512) so one graph is compiled: Inductor plans its own buffers."""
    model = LM(32000, 768, 12, 4).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    compiled = torch.compile(model, dynamic=False)
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def step():
        tokens = torch.randint(0, 32000, (16, 512), generator=gen).to(device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lm_loss(compiled(tokens), tokens)
        loss.backward()
        opt.step()

    step.reseed = gen.manual_seed
    return step


def build_mixed_master(device, seed=0):
    """Mixed precision by hand: the model's weights and gradients in bf16, fp32 master copies
    that AdamW updates, gradients cast up and weights copied back every step (12 x 1024,
    batch x sequence drawn every step)."""
    model = LM(32000, 1024, 16, 12).to(device).to(torch.bfloat16)
    params = list(model.parameters())
    master = [p.detach().float().clone().requires_grad_(True) for p in params]
    opt = torch.optim.AdamW(master, lr=1e-4)
    rng = random.Random(seed)

    def step():
        t = rng.choice((128, 256, 512, 1024))
        tokens = torch.randint(0, 32000, (max(1, 6144 // t), t), device=device)
        lm_loss(model(tokens), tokens).backward()
        for p, m in zip(params, master):
            m.grad = p.grad.float()
            p.grad = None
        opt.step()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            for p, m in zip(params, master):
                p.copy_(m)

    step.reseed = rng.seed
    return step


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
            if cache[i] is not None:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
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


def cached_forward(model, tokens, cache):
    """Logits of the last position of `tokens` after `cache` (per layer of `model`, an LM: (k, v)
    or None), each layer's cache grown by concatenation: decoding as a plain script does it."""
    start = 0 if cache[0] is None else cache[0][0].shape[2]
    t = tokens.shape[1]
    x = model.embed(tokens) + model.pos(torch.arange(start, start + t, device=tokens.device))
    for i, blk in enumerate(model.blocks):
        a, h = blk.attn, blk.ln1(x)
        n, _, d = h.shape
        q = a.q(h).view(n, t, a.heads, d // a.heads).transpose(1, 2)
        k, v = (z.transpose(1, 2) for z in a.kv(h).view(n, t, 2, a.heads, d // a.heads).unbind(2))
        if cache[i] is not None:
            k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
        cache[i] = (k, v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=start == 0 and t > 1)
        x = x + a.o(y.transpose(1, 2).reshape(n, t, d))
        x = x + blk.mlp(blk.ln3(x))
    return F.linear(model.ln(x[:, -1]), model.embed.weight)


def build_beam_search(device, seed=0):
    """A GPT-2-small-sized LM (12 x 768, fp16) answering requests by beam search, 4 beams: 4
    prompts of 32..384 tokens a request, 24..96 new tokens, each layer's KV cache grown by
    concatenation every token and reordered to the surviving beams (index_select); one request
    a step. Added 2026-11-26 (session 13), after the pool's constants of that day were set."""
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


def build_tiny_lm_serve(device, seed=0):
    """A small LM (6 x 384, vocab 32000, fp16) serving greedy generation: 2 requests a step, each
    a batch of 1..8 prompts of 16..256 tokens and 16..48 new tokens, the KV cache grown by
    concatenation: a program of about 120 MB, nearly all of it small blocks. TUNE half, added
    2026-11-26 (session 14); its half was fixed before it was first recorded."""
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


class GruAsr(nn.Module):
    """Speech recognizer: two convolutions over 80 mel bins (both stride 2 in frequency, the first
    in time too), a 3-layer bidirectional GRU of 320, a linear layer to 32 CTC symbols."""

    def __init__(self, hidden=320, symbols=32):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(1, 32, 3, 2, 1), nn.GELU(), nn.Conv2d(32, 32, 3, (2, 1), 1), nn.GELU())
        self.rnn = nn.GRU(32 * 20, hidden, 3, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, symbols)

    def forward(self, mel):
        h = self.conv(mel.unsqueeze(1))
        n, c, f, t = h.shape
        y, _ = self.rnn(h.permute(0, 3, 1, 2).reshape(n, t, c * f))
        return self.out(y).log_softmax(-1)


def build_gru_asr(device, seed=0):
    """GruAsr training with CTC (cuDNN's GRU and its workspaces): batch 4..24 of 200..1600 mel
    frames a step, targets a quarter as long, AdamW: a program (1.7 GB at its peak) whose
    activations change shape every step. TUNE half, added 2026-11-26 (session 14); its half was
    fixed before it was first recorded."""
    model = GruAsr().to(device)
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    rng = random.Random(seed)

    def step():
        batch, frames = rng.randrange(4, 25, 4), rng.randrange(200, 1601, 40)
        logp = model(torch.randn(batch, 80, frames, device=device))
        t = logp.shape[1]
        targets = torch.randint(1, 32, (batch, t // 4), device=device)
        loss = F.ctc_loss(logp.transpose(0, 1), targets, torch.full((batch,), t, device=device),
                          torch.full((batch,), t // 4, device=device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

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

    def forward(self, tokens, cache):
        """Logits of the last position; each layer's (k, v) in `cache` grown by concatenation."""
        x = self.embed(tokens)
        b, t, d = x.shape
        for i, L in enumerate(self.blocks):
            h = L["n1"](x)
            q = L["q"](h).view(b, t, self.heads, self.hd).transpose(1, 2)
            k, v = (z.transpose(1, 2) for z in L["kv"](h).view(b, t, 2, self.kv_heads, self.hd).unbind(2))
            if cache[i] is not None:
                k, v = torch.cat([cache[i][0], k], 2), torch.cat([cache[i][1], v], 2)
            cache[i] = (k, v)
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


# name -> (builder, steps recorded). Steps keep a trace near or under 100k rows.
CORPUS = {
    "gpt2m_accum": (build_gpt2m_accum, 3),
    "serve_paged": (build_serve_paged, 6),
    "moe_top2": (build_moe_top2, 12),
    "t5_encdec": (build_t5_encdec, 12),
    "whisper": (build_whisper, 12),
    "bert_dynamic": (build_bert_dynamic, 16),
    "ddp_buckets": (build_ddp_buckets, 10),
    "compiled_gpt": (build_compiled_gpt, 10),
    "mixed_master": (build_mixed_master, 8),
    "int8_infer": (build_int8_infer, 6),
    "beam_search": (build_beam_search, 6),
    "tiny_lm_serve": (build_tiny_lm_serve, 3),
    "gru_asr": (build_gru_asr, 12),
    "gqa_decode": (build_gqa_decode, 4),
    "w4_swap": (build_w4_swap, 6),
    **corpus_vision.CORPUS,
}
