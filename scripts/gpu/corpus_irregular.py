#!/usr/bin/env python3
"""Workloads of the trace corpus written in session 30 as REPORT traces, their half fixed in
data/traces/corpus.tsv before they were recorded (see corpus_workloads.py for the contract):
programs whose sizes follow their data, not their model's layers, so that no two steps ask for
the same sizes. Graphs of any size, sparse embedding gradients, documents packed into one
sequence of any length, audio clips of any duration: none of these shapes had been seen when
the pool's constants were chosen. Every size comes from the step's own `random.Random` (what
`step.reseed` resets); tensor values may come from torch's generator."""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from corpus_generation import rotary


class SageLayer(nn.Module):
    """GraphSAGE with mean aggregation: x_i' = W1 x_i + W2 mean over edges j -> i of x_j."""

    def __init__(self, dim_in, dim_out):
        super().__init__()
        self.own, self.neighbours = nn.Linear(dim_in, dim_out), nn.Linear(dim_in, dim_out, bias=False)

    def forward(self, x, src, dst, inv_degree):
        summed = torch.zeros_like(x).index_add_(0, dst, x[src])
        return self.own(x) + self.neighbours(summed * inv_degree)


def build_gnn_varsize(device, seed=0):
    """Graph classification training, fp32: a 4-layer GraphSAGE (128 -> 256 wide, mean
    aggregation by index_add_), mini-batches of 16..96 random graphs of 10..1500 nodes with
    2..12 edges a node, a per-graph mean for readout, AdamW. Every tensor's size follows the
    batch's node and edge counts (about 40k nodes and 300k edges a step), which never repeat."""
    layers = nn.ModuleList(SageLayer(128 if i == 0 else 256, 256) for i in range(4)).to(device)
    head = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    opt = torch.optim.AdamW(list(layers.parameters()) + list(head.parameters()), lr=1e-4)
    rng = random.Random(seed)

    def step():
        sizes = [rng.randint(10, 1500) for _ in range(rng.randint(16, 96))]
        edges = [n * rng.randint(2, 12) for n in sizes]
        graphs = torch.arange(len(sizes), device=device)
        nodes = torch.tensor(sizes, device=device)
        first = nodes.cumsum(0) - nodes
        node_graph = torch.repeat_interleave(graphs, nodes, output_size=sum(sizes))
        edge_graph = torch.repeat_interleave(graphs, torch.tensor(edges, device=device), output_size=sum(edges))
        src, dst = (first[edge_graph] + (torch.rand(len(edge_graph), device=device) * nodes[edge_graph]).long()
                    for _ in range(2))
        degree = torch.zeros(sum(sizes), device=device).index_add_(0, dst, torch.ones(len(dst), device=device))
        inv_degree = degree.clamp(min=1).reciprocal().unsqueeze(1)
        x = torch.randn(sum(sizes), 128, device=device)
        for layer in layers:
            x = F.relu(layer(x, src, dst, inv_degree))
        pooled = torch.zeros(len(sizes), 256, device=device).index_add_(0, node_graph, x) / nodes.unsqueeze(1)
        F.cross_entropy(head(pooled), torch.randint(0, 10, (len(sizes),), device=device)).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step.reseed = rng.seed
    return step


def build_recsys_sparse(device, seed=0):
    """Click-through training, DLRM-like, fp32: 8 embedding tables of 0.2..2 M rows x 64 (1.7
    GB) read by EmbeddingBag(sparse=True), bags of 1..79 ids; a bottom MLP over 13 dense
    features, pairwise dot products of the 9 feature vectors, a top MLP; SparseAdam for the
    tables (its state, 3.4 GB, made in the first step), Adam for the rest. Batches of
    512..8192: each table's sparse gradient holds a row per id looked up, and coalescing it
    makes temporaries of sizes that never repeat. Ids and offsets come from the CPU, as from a
    data loader."""
    rows = [2_000_000, 1_000_000, 500_000, 200_000, 1_500_000, 300_000, 800_000, 250_000]
    tables = nn.ModuleList(nn.EmbeddingBag(r, 64, mode="sum", sparse=True) for r in rows).to(device)
    bottom = nn.Sequential(nn.Linear(13, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 64),
                           nn.ReLU()).to(device)
    features = len(rows) + 1
    pairs = torch.triu_indices(features, features, 1, device=device)
    top = nn.Sequential(nn.Linear(64 + pairs.shape[1], 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                        nn.Linear(256, 1)).to(device)
    sparse_opt = torch.optim.SparseAdam(list(tables.parameters()), lr=1e-3)
    dense_opt = torch.optim.Adam(list(bottom.parameters()) + list(top.parameters()), lr=1e-3)
    rng = random.Random(seed)

    def step():
        batch = rng.randint(512, 8192)
        cpu = torch.Generator().manual_seed(rng.randrange(1 << 31))
        vectors = [bottom(torch.randn(batch, 13, device=device))]
        for table, n in zip(tables, rows):
            lengths = torch.randint(1, 2 * rng.randint(1, 40), (batch,), generator=cpu)
            ids = torch.randint(0, n, (int(lengths.sum()),), generator=cpu)
            offsets = lengths.cumsum(0) - lengths
            vectors.append(table(ids.to(device, non_blocking=True), offsets.to(device, non_blocking=True)))
        z = torch.stack(vectors, 1)
        dots = torch.bmm(z, z.transpose(1, 2))[:, pairs[0], pairs[1]]
        logit = top(torch.cat([vectors[0], dots], 1)).squeeze(1)
        F.binary_cross_entropy_with_logits(logit, torch.randint(0, 2, (batch,), device=device).float()).backward()
        sparse_opt.step()
        dense_opt.step()
        sparse_opt.zero_grad(set_to_none=True)
        dense_opt.zero_grad(set_to_none=True)

    step.reseed = rng.seed
    return step


class PackedBlock(nn.Module):
    """A Llama block (RMSNorm, rotary positions, SwiGLU) over one packed sequence: attention
    stays within each document through a block-diagonal causal mask."""

    def __init__(self, dim, heads, ffn):
        super().__init__()
        self.heads = heads
        self.n1, self.n2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.qkv, self.o = nn.Linear(dim, 3 * dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.gate_up, self.down = nn.Linear(dim, 2 * ffn, bias=False), nn.Linear(ffn, dim, bias=False)

    def forward(self, x, cos, sin, mask):
        t, d = x.shape[1], x.shape[2]
        q, k, v = (z.view(1, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(self.n1(x)).chunk(3, -1))
        q, k = (rotary(z, cos, sin) for z in (q, k))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(1, t, d))
        g, u = self.gate_up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


def build_llama_packed(device, seed=0):
    """Decoder pretraining with documents packed into one sequence, bf16 autocast: a Llama-like
    model (8 layers of 1024, 16 heads, SwiGLU 2816, vocab 32000), each step documents of
    32..2048 tokens packed until 2048..8192 tokens (the step's token budget, drawn), rotary
    positions restarting at each document, a block-diagonal causal mask of the packed length
    squared (up to 64 MiB), every layer checkpointed (recomputed in the backward), AdamW."""
    dim, heads, vocab = 1024, 16, 32000
    embed = nn.Embedding(vocab, dim).to(device)
    blocks = nn.ModuleList(PackedBlock(dim, heads, 2816) for _ in range(8)).to(device)
    norm, head = nn.RMSNorm(dim).to(device), nn.Linear(dim, vocab, bias=False).to(device)
    params = [p for m in (embed, blocks, norm, head) for p in m.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    half = dim // heads // 2
    inv_freq = 1.0 / 10000 ** (torch.arange(half, device=device) / half)
    rng = random.Random(seed)

    def step():
        budget, docs = rng.randint(2048, 8192), []
        while sum(docs) < budget:
            docs.append(min(rng.randint(32, 2048), budget - sum(docs)))
        t = sum(docs)
        lengths = torch.tensor(docs, device=device)
        doc = torch.repeat_interleave(torch.arange(len(docs), device=device), lengths, output_size=t)
        pos = torch.arange(t, device=device) - (lengths.cumsum(0) - lengths)[doc]
        angle = (pos[:, None] * inv_freq).repeat(1, 2)
        cos, sin = angle.cos().to(torch.bfloat16), angle.sin().to(torch.bfloat16)
        mask = (doc[:, None] == doc[None, :]) & (pos[:, None] >= pos[None, :])
        tokens = torch.randint(0, vocab, (1, t + 1), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            x = embed(tokens[:, :-1])
            for blk in blocks:
                x = checkpoint(blk, x, cos, sin, mask, use_reentrant=False)
            logits = head(norm(x))
        F.cross_entropy(logits.float().view(t, vocab), tokens[0, 1:]).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step.reseed = rng.seed
    return step


class Demucs(nn.Module):
    """A Demucs-like 1-D U-Net: 5 encoder layers (a convolution of stride 4, then a 1 x 1 one
    with a GLU), an LSTM at the bottom, 5 decoder layers mirroring them, skip connections."""

    def __init__(self, width=48, depth=5):
        super().__init__()
        self.enc, self.dec = nn.ModuleList(), nn.ModuleList()
        ch_in = 1
        for i in range(depth):
            ch = width * 2 ** i
            self.enc.append(nn.Sequential(nn.Conv1d(ch_in, ch, 8, 4, 2), nn.ReLU(), nn.Conv1d(ch, 2 * ch, 1),
                                          nn.GLU(1)))
            up = [nn.Conv1d(ch, 2 * ch, 1), nn.GLU(1), nn.ConvTranspose1d(ch, ch_in, 8, 4, 2)]
            self.dec.insert(0, nn.Sequential(*up, *([nn.ReLU()] if i else [])))
            ch_in = ch
        self.lstm = nn.LSTM(ch_in, ch_in, 2, batch_first=True)

    def forward(self, x):
        skips = []
        for layer in self.enc:
            x = layer(x)
            skips.append(x)
        x = self.lstm(x.transpose(1, 2))[0].transpose(1, 2)
        for layer in self.dec:
            x = layer(x + skips.pop())
        return x


def build_audio_unet1d(device, seed=0):
    """Speech enhancement training, fp16 autocast: a Demucs-like 1-D U-Net (48..768 channels)
    on batches of 2..24 clips of 1..20 s at 16 kHz (at most 120 s of audio a batch), padded to
    the longest clip rounded to the model's stride of 1024 samples; an L1 loss plus a
    multi-resolution STFT loss (FFT sizes 512, 1024, 2048: cuFFT plans and their work areas
    for lengths that never repeat), Adam."""
    model = Demucs().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    scaler = torch.amp.GradScaler("cuda")
    windows = {n: torch.hann_window(n, device=device) for n in (512, 1024, 2048)}
    rng = random.Random(seed)

    def spectrum(x, n):
        return torch.stft(x.float().flatten(0, 1), n, n // 4, window=windows[n], return_complex=True).abs()

    def step():
        seconds = [rng.uniform(1, 20) for _ in range(rng.randint(2, 24))]
        while sum(seconds) > 120:
            seconds.pop()
        length = -(-int(max(seconds) * 16000) // 1024) * 1024
        clean = torch.randn(len(seconds), 1, length, device=device)
        noisy = clean + 0.3 * torch.randn_like(clean)
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(noisy)
            loss = F.l1_loss(out.float(), clean)
        for n in windows:
            want, got = spectrum(clean, n), spectrum(out, n)
            loss = loss + torch.linalg.norm(want - got) / torch.linalg.norm(want) + F.l1_loss(got.log1p(), want.log1p())
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    step.reseed = rng.seed
    return step


# name -> (builder, steps recorded). Steps keep a trace near or under 100k rows.
CORPUS = {
    "gnn_varsize": (build_gnn_varsize, 30),
    "recsys_sparse": (build_recsys_sparse, 30),
    "llama_packed": (build_llama_packed, 12),
    "audio_unet1d": (build_audio_unet1d, 16),
}
