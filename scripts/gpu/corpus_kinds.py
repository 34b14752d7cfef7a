#!/usr/bin/env python3
"""Workloads of the trace corpus written in session 31 as REPORT traces, their half fixed in
data/traces/corpus.tsv before they were recorded (see corpus_workloads.py for the contract):
kinds of model the corpus lacked. A state-space model whose scan runs step by step, saving
a small state per time step for the backward; 3-D convolutions over video clips of any length
and size; distillation, where a frozen teacher's activations come and go beside a student's
training, an EMA copy of the student and an fp16 loss scaler. Every size comes from the step's
own `random.Random`."""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_vision import ViT


class SelectiveScan(nn.Module):
    """A Mamba-like block in plain PyTorch: input projection, causal depthwise convolution, a
    selective state-space scan run one time step at a time (state `inner x state` per
    sequence), gated output projection."""

    def __init__(self, dim, state=16, expand=2, conv=4):
        super().__init__()
        inner, self.rank, self.state = expand * dim, dim // 16, state
        self.norm = nn.LayerNorm(dim)
        self.inp, self.out = nn.Linear(dim, 2 * inner), nn.Linear(inner, dim)
        self.conv = nn.Conv1d(inner, inner, conv, groups=inner, padding=conv - 1)
        self.x_proj, self.dt = nn.Linear(inner, self.rank + 2 * state), nn.Linear(self.rank, inner)
        self.a_log = nn.Parameter(torch.log(torch.arange(1, state + 1, dtype=torch.float)).repeat(inner, 1))

    def forward(self, x):
        t = x.shape[1]
        u, z = self.inp(self.norm(x)).chunk(2, -1)
        u = F.silu(self.conv(u.transpose(1, 2))[..., :t].transpose(1, 2))
        dt, b, c = self.x_proj(u).split([self.rank, self.state, self.state], -1)
        dt, a = F.softplus(self.dt(dt)), -torch.exp(self.a_log)
        h = u.new_zeros(u.shape[0], u.shape[2], self.state)
        ys = []
        for i in range(t):
            h = torch.exp(dt[:, i, :, None] * a) * h + (dt[:, i] * u[:, i])[..., None] * b[:, i, None]
            ys.append((h * c[:, i, None]).sum(-1))
        return x + self.out(torch.stack(ys, 1) * F.silu(z))


def build_mamba_scan(device, seed=0):
    """A 4-layer Mamba-like language model (width 512, state 16, vocab 16384) trained with
    AdamW, 4..16 sequences of 64..256 tokens a step, the scan in fp32 one time step at a time:
    each step's state is saved for the backward, thousands of same-sized tensors of 128 KiB to
    1 MiB that live until the backward reaches them."""
    embed = nn.Embedding(16384, 512).to(device)
    layers = nn.ModuleList(SelectiveScan(512) for _ in range(4)).to(device)
    norm = nn.LayerNorm(512).to(device)
    opt = torch.optim.AdamW([*embed.parameters(), *layers.parameters(), *norm.parameters()], lr=3e-4)
    rng = random.Random(seed)

    def step():
        batch, length = rng.randint(4, 16), rng.randrange(64, 257, 32)
        tokens = torch.randint(0, 16384, (batch, length), device=device)
        x = embed(tokens)
        for layer in layers:
            x = layer(x)
        logits = F.linear(norm(x), embed.weight)
        F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step.reseed = rng.seed
    return step


def factored_conv(a, b, stride=1):
    """A (2+1)-D convolution: spatial 1 x 3 x 3, then temporal 3 x 1 x 1, each normalized."""
    mid = (a + b) // 2
    return nn.Sequential(
        nn.Conv3d(a, mid, (1, 3, 3), (1, stride, stride), (0, 1, 1), bias=False), nn.BatchNorm3d(mid), nn.ReLU(),
        nn.Conv3d(mid, b, (3, 1, 1), (stride, 1, 1), (1, 0, 0), bias=False), nn.BatchNorm3d(b))


class VideoBlock(nn.Module):
    def __init__(self, a, b, stride):
        super().__init__()
        self.f, self.g = factored_conv(a, b, stride), factored_conv(b, b)
        self.skip = (nn.Sequential(nn.Conv3d(a, b, 1, stride, bias=False), nn.BatchNorm3d(b))
                     if stride != 1 or a != b else nn.Identity())

    def forward(self, x):
        return F.relu(self.skip(x) + self.g(F.relu(self.f(x))))


def build_video_r2plus1d(device, seed=0):
    """R(2+1)D-10-like video classification (stages of 64..512 channels, 400 classes) trained
    with SGD and momentum under bf16 autocast: batch 4..12 of clips of 8..24 frames at 112..160
    px drawn per step. 5-D activations whose sizes follow frames x pixels, and cuDNN's 3-D
    convolution work areas from PyTorch's allocator."""
    stem = nn.Sequential(nn.Conv3d(3, 64, (3, 7, 7), (1, 2, 2), (1, 3, 3), bias=False), nn.BatchNorm3d(64), nn.ReLU())
    body = [VideoBlock(a, b, s) for a, b, s in ((64, 64, 1), (64, 128, 2), (128, 256, 2), (256, 512, 2))]
    model = nn.Sequential(stem, *body, nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(512, 400)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rng = random.Random(seed)

    def step():
        batch, frames, px = rng.randint(4, 12), rng.randrange(8, 25, 8), rng.randrange(112, 161, 16)
        clips = torch.randn(batch, 3, frames, px, px, device=device)
        labels = torch.randint(0, 400, (batch,), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(clips).float(), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step.reseed = rng.seed
    return step


def build_distill_ema(device, seed=0):
    """Knowledge distillation with the habits that come with it: a ViT-B/16 teacher (fp16,
    eval, no_grad) and a ViT-S/16 student (12 x 384) trained under fp16 autocast with a
    GradScaler (its inf checks), AdamW, and an EMA copy of the student updated with
    `torch._foreach_lerp_` every step; batch 32..128 at 160..256 px drawn per step. The
    teacher's activations are gone before the student's backward; the EMA copy and the
    scaler's small tensors live throughout."""
    teacher = ViT(768, 12, 12).to(device).half().eval()
    student = ViT(384, 12, 6).to(device)
    ema = [p.detach().clone() for p in student.parameters()]
    opt = torch.optim.AdamW(student.parameters(), lr=5e-4)
    scaler = torch.amp.GradScaler("cuda")
    rng = random.Random(seed)

    def step():
        batch, px = rng.randrange(32, 129, 16), rng.randrange(160, 257, 32)
        images = torch.randn(batch, 3, px, px, device=device)
        with torch.no_grad():
            soft = F.softmax(teacher(images.half()).float() / 2.0, -1)
        with torch.autocast("cuda", dtype=torch.float16):
            logits = student(images)
        loss = F.kl_div(F.log_softmax(logits.float() / 2.0, -1), soft, reduction="batchmean")
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            torch._foreach_lerp_(ema, [p.detach() for p in student.parameters()], 0.001)

    step.reseed = rng.seed
    return step


# name -> (builder, steps recorded). Steps keep a trace near or under 100k rows.
CORPUS = {
    "mamba_scan": (build_mamba_scan, 3),
    "video_r2plus1d": (build_video_r2plus1d, 12),
    "distill_ema": (build_distill_ema, 12),
}
