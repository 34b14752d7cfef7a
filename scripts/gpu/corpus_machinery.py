#!/usr/bin/env python3
"""Workloads of the trace corpus written in session 31 as REPORT traces, their half fixed in
data/traces/corpus.tsv before they were recorded (see corpus_workloads.py for the contract):
programs whose memory is laid out by PyTorch's own machinery rather than by the model's code.
FSDP2 gathering and freeing each block's parameters around its forward and backward; Inductor
planning buffers for a graph of symbolic sizes; a contrastive dual encoder whose two towers
see a new batch every step; a transformer encoder over nested (jagged) tensors, whose packed
sizes are the sum of the batch's lengths; autograd moving every saved activation to the host
and back. Every size comes from the step's own
`random.Random`."""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_everyday import ViT


def build_fsdp_shard(device, seed=0):
    """FSDP2 (`fully_shard` per block and at the root, world size 1 over NCCL) of a 12 x 768
    language model, bf16 parameters with fp32 reduction, AdamW; batch x sequence drawn every
    step (8,192 tokens). Each block's parameters are gathered into buffers made for its
    forward and again for its backward and freed after each, beside the sharded fp32
    parameters, gradients and optimizer state."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from corpus_workloads import LM, init_process_group, lm_loss

    if init_process_group() != "nccl":
        raise RuntimeError("fsdp_shard needs NCCL")
    model = LM(32000, 768, 12, 12).to(device)
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)

    def step():
        t = rng.choice((256, 384, 512, 768, 1024))
        tokens = torch.randint(0, 32000, (max(2, 8192 // t), t), device=device)
        lm_loss(model(tokens), tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step.reseed = rng.seed
    return step


def build_compiled_dynamic(device, seed=0):
    """torch.compile (Inductor, `dynamic=True`) of a 4 x 512 language model in training under
    bf16 autocast, batch and sequence drawn every step from 4 x 8 shapes: one graph of
    symbolic sizes, whose buffers Inductor plans anew at each shape."""
    from corpus_workloads import LM, lm_loss

    model = LM(32000, 512, 8, 4).to(device)
    compiled = torch.compile(model, dynamic=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)

    def step():
        t = rng.choice((128, 192, 256, 384, 512, 640, 768, 1024))
        b = rng.choice((4, 6, 8, 12))
        tokens = torch.randint(0, 32000, (b, t), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lm_loss(compiled(tokens), tokens)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step.reseed = rng.seed
    return step


class TextTower(nn.Module):
    """CLIP's text encoder: causal pre-norm layers of PyTorch's own, the last token pooled."""

    def __init__(self, dim, heads, layers, out, vocab=49408, ctx=77):
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, dim), nn.Parameter(torch.zeros(1, ctx, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm, self.proj = nn.LayerNorm(dim), nn.Linear(dim, out, bias=False)

    def forward(self, tokens):
        t = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=tokens.device)
        x = self.encoder(self.embed(tokens) + self.pos[:, :t], mask=mask, is_causal=True)
        return self.proj(self.norm(x[:, -1]))


def build_clip_contrastive(device, seed=0):
    """CLIP-style contrastive training: a ViT-B/32-like image tower (8 x 512 at 224 px) and a
    text tower (8 x 512, captions of 16..77 tokens), batch 64..320 drawn every step, bf16
    autocast, AdamW; the batch x batch similarity matrix scored both ways. Both towers'
    activations are live together at the loss, each at the step's batch size."""
    image = ViT(512, 8, 8, 32, classes=512).to(device)
    text = TextTower(512, 8, 8, 512).to(device)
    scale = nn.Parameter(torch.tensor(2.659, device=device))
    opt = torch.optim.AdamW([*image.parameters(), *text.parameters(), scale], lr=1e-4)
    rng = random.Random(seed)

    def step():
        batch, length = rng.randrange(64, 321, 32), rng.randint(16, 77)
        pixels = torch.randn(batch, 3, 224, 224, device=device)
        tokens = torch.randint(0, 49408, (batch, length), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            a = F.normalize(image(pixels).float(), dim=-1)
            b = F.normalize(text(tokens).float(), dim=-1)
        logits = scale.exp() * a @ b.T
        labels = torch.arange(batch, device=device)
        ((F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step.reseed = rng.seed
    return step


class JaggedLayer(nn.Module):
    """A pre-norm encoder layer over a nested tensor of layout `torch.jagged` (batch, ragged
    length, dim): attention by SDPA over the ragged dimension, no padding anywhere."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.o = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        dim = x.shape[-1]
        heads = lambda t: t.unflatten(-1, (self.heads, dim // self.heads)).transpose(1, 2)  # noqa: E731
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        a = F.scaled_dot_product_attention(heads(q), heads(k), heads(v))
        x = x + self.o(a.transpose(1, 2).flatten(-2))
        return x + self.mlp(self.ln2(x))


def build_nested_encoder(device, seed=0):
    """A BERT-base-sized encoder (12 x 768) fine-tuned on nested jagged tensors: 16..48
    documents a step of 32..512 tokens each, packed without padding, bf16 autocast, AdamW,
    each document mean-pooled into a classifier. Every activation is sized by the sum of the
    step's lengths, a new size nearly every step."""
    dim = 768
    embed = nn.Embedding(30522, dim).to(device)
    layers = nn.ModuleList(JaggedLayer(dim, 12) for _ in range(12)).to(device)
    head = nn.Linear(dim, 4).to(device)
    opt = torch.optim.AdamW([*embed.parameters(), *layers.parameters(), *head.parameters()], lr=2e-5)
    rng = random.Random(seed)

    def step():
        lengths = [rng.randint(32, 512) for _ in range(rng.randint(16, 48))]
        docs = [torch.randint(0, 30522, (n,), device=device) for n in lengths]
        tokens = torch.nested.nested_tensor(docs, layout=torch.jagged)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            x = embed(tokens)
            for layer in layers:
                x = layer(x)
            pooled = torch.stack([d.mean(0) for d in x.unbind()])
            logits = head(pooled)
        labels = torch.randint(0, 4, (len(lengths),), device=device)
        F.cross_entropy(logits.float(), labels).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step.reseed = rng.seed
    return step


def build_offload_activations(device, seed=0):
    """A 12 x 1024 language model (vocab 50257) trained with every activation saved for the
    backward moved to pinned host memory as it is made and brought back when the backward
    needs it (`torch.autograd.graph.save_on_cpu`), bf16 autocast, AdamW; batch x sequence
    drawn every step (8,192 tokens). The forward frees each activation soon after making it,
    the backward makes them again one layer at a time."""
    from corpus_workloads import LM, lm_loss

    model = LM(50257, 1024, 16, 12).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    pinned = torch.device(device).type == "cuda"  # pinning needs CUDA; a CPU trial run has none
    rng = random.Random(seed)

    def step():
        t = rng.choice((256, 384, 512, 768, 1024))
        tokens = torch.randint(0, 50257, (max(2, 8192 // t), t), device=device)
        with torch.autograd.graph.save_on_cpu(pin_memory=pinned), torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lm_loss(model(tokens), tokens)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step.reseed = rng.seed
    return step


# name -> (builder, steps recorded). Steps keep a trace near or under 100k rows.
CORPUS = {
    "fsdp_shard": (build_fsdp_shard, 10),
    "compiled_dynamic": (build_compiled_dynamic, 12),
    "clip_contrastive": (build_clip_contrastive, 12),
    "nested_encoder": (build_nested_encoder, 10),
    "offload_activations": (build_offload_activations, 10),
}
