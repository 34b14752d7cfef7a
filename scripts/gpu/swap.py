#!/usr/bin/env python3
"""A model-swapping pipeline, the way video and diffusion pipelines fit several large models
on one GPU: each model in turn is moved to the GPU, runs a forward pass, and goes back to the
CPU, while the stages' outputs stay on the GPU for the next stage.

Why: models of different shapes freed and loaded in turn leave a caching allocator with cached
blocks that fit the next model badly, so the memory it reserves climbs above what is ever
allocated at once. The program prints PyTorch's own peak allocated and reserved figures and a
checksum of every stage's output, so runs under different allocators and caps can be compared.
It knows nothing of what allocates for it.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn

RESULT_TAG = "GPUCHECK-RESULT"


def emit(result):
    print(RESULT_TAG, json.dumps(result), flush=True)


class ConvDecoder(nn.Module):
    """A VAE-decoder-like stack of 3x3 convolutions at one resolution, then an upsampling."""

    def __init__(self, channels, blocks):
        super().__init__()
        layers = []
        for _ in range(blocks):
            layers += [nn.Conv2d(channels, channels, 3, padding=1), nn.GroupNorm(32, channels), nn.SiLU()]
        self.body = nn.Sequential(*layers)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.out = nn.Conv2d(channels, 3, 3, padding=1)

    def forward(self, x):
        return self.out(self.up(self.body(x)))


def build_models(tiny):
    """(name, model, make_input) for each stage, built on the CPU with random weights."""
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

    def bert(**kw):
        return lambda: BertModel(BertConfig(**kw))

    def gpt2(**kw):
        return lambda: GPT2Model(GPT2Config(**kw))

    if tiny:
        small = dict(vocab_size=500, n_positions=128, bos_token_id=0, eos_token_id=0)
        specs = [
            (
                "bert",
                bert(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, vocab_size=500),
            ),
            ("gpt2-wide", gpt2(n_embd=96, n_layer=2, n_head=2, **small)),
            ("conv-decoder", lambda: ConvDecoder(32, 2)),
            ("gpt2", gpt2(n_embd=64, n_layer=2, n_head=2, **small)),
        ]
        tokens, image = (2, 32), (1, 32, 16, 16)
    else:
        specs = [
            # BERT-large encoder: ~335M parameters, 1.25 GiB.
            (
                "bert-large",
                bert(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
            ),
            # GPT-2 at GPT-2 large's width (1280), 12 layers: ~300M parameters, 1.12 GiB.
            ("gpt2-1280", gpt2(n_embd=1280, n_layer=12, n_head=20)),
            # 24 convolutions of 768 channels: ~127M parameters, 0.47 GiB.
            ("conv-decoder", lambda: ConvDecoder(768, 24)),
            # GPT-2 small: ~124M parameters, 0.46 GiB.
            ("gpt2", gpt2()),
        ]
        tokens, image = (4, 512), (2, 768, 32, 32)
    models = []
    for i, (name, make) in enumerate(specs):
        torch.manual_seed(100 + i)
        model = make().eval()
        if name.startswith("conv"):
            shape = image

            def make_input(device, shape=shape, seed=i):
                g = torch.Generator().manual_seed(seed)
                return torch.randn(*shape, generator=g).to(device)

        else:
            vocab = model.config.vocab_size
            shape = tokens

            def make_input(device, shape=shape, seed=i, vocab=vocab):
                g = torch.Generator().manual_seed(seed)
                return torch.randint(0, vocab, shape, generator=g).to(device)

        models.append((name, model, make_input))
    return models


def forward(model, x):
    if isinstance(model, ConvDecoder):
        return model(x)
    if "GPT2" in type(model).__name__:
        return model(input_ids=x, use_cache=False).last_hidden_state
    return model(input_ids=x).last_hidden_state


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--keep", type=int, default=3, help="stage outputs kept on the GPU")
    p.add_argument("--tiny", action="store_true", help="tiny models (CPU tests)")
    p.add_argument("--device", default="cuda")
    args = p.parse_args(argv)
    started = time.perf_counter()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # Forward passes only: deterministic with cuBLAS's fixed workspace; warn_only so that an op
    # without a deterministic variant warns instead of stopping the pipeline.
    torch.use_deterministic_algorithms(True, warn_only=True)

    models = build_models(args.tiny)
    sizes = {name: sum(p.numel() * p.element_size() for p in m.parameters()) for name, m, _ in models}
    build_s = time.perf_counter() - started
    if cuda:
        torch.cuda.init()
        torch.cuda.reset_peak_memory_stats(device)

    checksums, kept = [], []
    stages = 0
    with torch.no_grad():
        for r in range(args.rounds):
            for name, model, make_input in models:
                model.to(device)
                x = make_input(device)
                with torch.autocast(device.type, dtype=torch.bfloat16):
                    out = forward(model, x)
                # The stage's output stays on the GPU, as a pipeline's latents do; a scaled
                # copy per round so each round's kept tensors differ in size.
                keep = out.float()[: max(1, out.shape[0] - r % 2)].clone()
                d = keep.double()
                checksums.append(f"{d.sum().item()!r}/{d.square().sum().item()!r}")
                kept.append(keep)
                del out, x
                kept = kept[-args.keep :]
                model.to("cpu")
                stages += 1
    if cuda:
        torch.cuda.synchronize(device)

    result = {
        "device": args.device,
        "torch": torch.__version__,
        "models": sizes,
        "rounds": args.rounds,
        "stages": stages,
        "checksums": checksums,
        "build_s": build_s,
        "no_caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING"),
    }
    if cuda:
        result.update(
            {
                "gpu": torch.cuda.get_device_name(device),
                "max_memory_allocated": torch.cuda.max_memory_allocated(device),
                "max_memory_reserved": torch.cuda.max_memory_reserved(device),
                "mem_get_info": list(torch.cuda.mem_get_info(device)),
            }
        )
    result["wall_s"] = time.perf_counter() - started
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
