#!/usr/bin/env python3
"""A plain PyTorch training loop, GPT-2 small or ResNet-50, that prints every step's loss and
time as one JSON line at the end.

Why it is built this way: driver.py starts this same program with and without a preloaded
allocator and compares what it prints. Fixed seeds, one fixed batch and
torch.use_deterministic_algorithms(True) (with CUBLAS_WORKSPACE_CONFIG set) make two runs on
the same GPU produce the same losses bit for bit, so a difference can only come from memory
handed out wrongly. The program itself knows nothing of any allocator.
"""

import argparse
import gc
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

RESULT_TAG = "GPUCHECK-RESULT"


def emit(result):
    """One line the driver looks for; everything else on stdout/stderr is ignored."""
    print(RESULT_TAG, json.dumps(result), flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=["gpt2", "resnet50"], required=True)
    p.add_argument("--steps", type=int, default=30, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--batch", type=int, default=None, help="gpt2: 8, resnet50: 64")
    p.add_argument("--seq", type=int, default=1024, help="gpt2 sequence length")
    p.add_argument("--image", type=int, default=224, help="resnet50 image size")
    p.add_argument("--tiny", action="store_true", help="a tiny GPT-2 config (CPU tests)")
    p.add_argument("--device", default="cuda", help="cuda (the check) or cpu (local tests)")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


# --- ResNet-50 without torchvision --------------------------------------------------------
# torchvision.models.resnet50(weights=None) is used when torchvision is installed; this is the
# same architecture (bottleneck blocks [3, 4, 6, 3], stride on the 3x3 conv) for machines
# without it.


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._layer(64, 3)
        self.layer2 = self._layer(128, 4, stride=2)
        self.layer3 = self._layer(256, 6, stride=2)
        self.layer4 = self._layer(512, 3, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * 4, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * 4:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * 4, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * 4),
            )
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * 4
        layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50():
    """torchvision's ResNet-50 with random weights, or the same network written out above."""
    try:
        import torchvision

        return torchvision.models.resnet50(weights=None), "torchvision " + torchvision.__version__
    except ImportError:
        return ResNet50(), "hand-written (no torchvision)"


# --- the two workloads ----------------------------------------------------------------------


def gpt2_workload(args, device):
    """GPT-2 small (random weights) on one fixed batch of random tokens, AdamW."""
    from transformers import GPT2Config, GPT2LMHeadModel

    if args.tiny:
        config = GPT2Config(
            n_layer=2,
            n_embd=64,
            n_head=2,
            vocab_size=1000,
            n_positions=args.seq,
            bos_token_id=0,
            eos_token_id=0,
        )
    else:
        config = GPT2Config()
    model = GPT2LMHeadModel(config).to(device)
    model.train()
    batch = args.batch or 8
    gen = torch.Generator().manual_seed(1234)
    tokens = torch.randint(0, config.vocab_size, (batch, args.seq), generator=gen).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)

    def forward():
        logits = model(input_ids=tokens, use_cache=False).logits
        return logits

    def loss_of(logits):
        # Next-token loss in float32, written out so it does not depend on the transformers
        # version's own loss helper.
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(), tokens[:, 1:].reshape(-1))

    info = {
        "batch": batch,
        "seq": args.seq,
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
    }
    import transformers

    info["transformers"] = transformers.__version__
    return model, optimizer, forward, loss_of, info


def resnet50_workload(args, device):
    """ResNet-50 (random weights), channels-last, one fixed batch of random images, SGD."""
    model, source = resnet50()
    model = model.to(device, memory_format=torch.channels_last)
    model.train()
    batch = args.batch or 64
    gen = torch.Generator().manual_seed(1234)
    images = torch.randn(batch, 3, args.image, args.image, generator=gen)
    images = images.to(device).contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), generator=gen).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)

    def forward():
        return model(images)

    def loss_of(out):
        return F.cross_entropy(out.float(), labels)

    return model, optimizer, forward, loss_of, {"batch": batch, "image": args.image, "resnet": source}


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(args, warn_only=False):
    device = torch.device(args.device)
    # Determinism first: cuBLAS reads CUBLAS_WORKSPACE_CONFIG when its handle is made.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    torch.backends.cudnn.benchmark = False

    build = gpt2_workload if args.model == "gpt2" else resnet50_workload
    model, optimizer, forward, loss_of, info = build(args, device)

    losses, times = [], []
    for _ in range(args.warmup + args.steps):
        synchronize(device)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            out = forward()
        loss = loss_of(out)
        loss.backward()
        optimizer.step()
        synchronize(device)
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
        del out, loss

    timed = times[args.warmup :]
    result = {
        "model": args.model,
        "device": args.device,
        "steps": args.steps,
        "warmup": args.warmup,
        # repr keeps every bit of the float32 loss (a Python float holds it exactly).
        "losses": [repr(x) for x in losses],
        "step_ms": [t * 1e3 for t in timed],
        "median_step_ms": statistics.median(timed) * 1e3 if timed else None,
        "params": sum(p.numel() for p in model.parameters()),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "no_caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING"),
        "determinism": "warn_only" if warn_only else "strict",
    }
    result.update(info)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        result.update(
            {
                "gpu": torch.cuda.get_device_name(device),
                "max_memory_allocated": torch.cuda.max_memory_allocated(device),
                "max_memory_reserved": torch.cuda.max_memory_reserved(device),
                "mem_get_info": [free, total],
            }
        )
    return result


def main(argv=None):
    args = parse_args(argv)
    started = time.perf_counter()
    try:
        result, why = None, None
        try:
            result = train(args)
        except RuntimeError as e:
            # An op of this PyTorch/transformers pair with no deterministic implementation: train
            # again with warnings instead of errors, and say so (losses may then differ by chance).
            if "deterministic" not in str(e):
                raise
            why = str(e).strip().splitlines()[0][:200]
        if result is None:
            gc.collect()  # the first attempt's tensors, now that its traceback is gone
            if args.device == "cuda":
                torch.cuda.empty_cache()
            result = train(args, warn_only=True)
            result["determinism"] = f"warn_only: {why}"
    except Exception as e:  # report what broke, then fail the way Python does
        emit({"model": args.model, "error": f"{type(e).__name__}: {e}"})
        raise
    result["wall_s"] = time.perf_counter() - started
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
