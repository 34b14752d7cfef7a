#!/usr/bin/env python3
"""Workloads of the trace corpus recorded from the caching allocator's history: the REPORT half
(data/traces/corpus.tsv), written so that the pool's constants are never chosen on them, and
the TUNE traces added later (each says so; corpus.tsv is what decides a half). Training of
language and sequence models here, their inference and serving in corpus_serving.py, vision and
staged pipelines in corpus_vision.py, generation by beam search and diffusion sampling
(TUNE traces written in session 23) in corpus_generation.py, programs whose sizes follow their
data and everyday habits (REPORT traces written in session 30) in corpus_irregular.py and
corpus_everyday.py, programs laid out by PyTorch's own machinery and kinds of model the
corpus lacked (REPORT traces written in session 31) in corpus_machinery.py and corpus_kinds.py.
Same contract as workloads.py:
`build_<name>(device, seed=0)` returns a function that runs one step; seeds are fixed, so every
process of one workload runs the same sequence of shapes. Models are built from configs with
random weights (nothing is downloaded). `CORPUS` maps each name to its builder and the number of
steps a trace records.
"""

import os
import random
import socket

import torch
import torch.nn as nn
import torch.nn.functional as F

import corpus_everyday
import corpus_generation
import corpus_irregular
import corpus_kinds
import corpus_machinery
import corpus_serving
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

    def reseed(seed):
        # The requests in flight go too: else the steps after a reseed serve whatever earlier
        # steps left running, and two blocks with one seed do different work.
        rng.seed(seed)
        server.active.clear()

    step.reseed = reseed
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
    "gru_asr": (build_gru_asr, 12),
    **corpus_serving.CORPUS,
    **corpus_vision.CORPUS,
    **corpus_generation.CORPUS,
    **corpus_irregular.CORPUS,
    **corpus_everyday.CORPUS,
    **corpus_machinery.CORPUS,
    **corpus_kinds.CORPUS,
}
