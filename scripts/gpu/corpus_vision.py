#!/usr/bin/env python3
"""Vision and staged-pipeline workloads of the trace corpus (see corpus_workloads.py for the
contract; data/traces/corpus.tsv gives each its half): DiT training at several resolutions, UNet
inference at several resolutions, ViT training at four resolutions, ConvNeXt training, a
FramePack-like pipeline whose three models take turns on the GPU, two GANs, CNN serving,
segmentation inference, multi-scale detection training and VAE decoding."""

import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F


class DiTBlock(nn.Module):
    """Transformer block with adaLN-zero modulation from the timestep embedding."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim, elementwise_affine=False)
        self.ln2 = nn.LayerNorm(dim, elementwise_affine=False)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim))
        self.mod = nn.Linear(dim, 6 * dim)

    def forward(self, x, c):
        b, t, d = x.shape
        s1, g1, a1, s2, g2, a2 = self.mod(F.silu(c)).unsqueeze(1).chunk(6, -1)
        y = self.ln1(x) * (1 + g1) + s1
        q, k, v = self.qkv(y).view(b, t, 3, self.heads, d // self.heads).transpose(1, 3).unbind(2)
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + a1 * self.proj(y)
        return x + a2 * self.mlp(self.ln2(x) * (1 + g2) + s2)


def timestep_embedding(t, dim):
    freqs = torch.exp(-math.log(10000) * torch.arange(dim // 2, device=t.device) / (dim // 2))
    args = t.float()[:, None] * freqs[None]
    return torch.cat([args.cos(), args.sin()], -1)


class DiT(nn.Module):
    def __init__(self, dim=768, heads=12, layers=12, patch=2, channels=4):
        super().__init__()
        self.patch, self.channels = patch, channels
        self.embed = nn.Conv2d(channels, dim, patch, stride=patch)
        self.t_mlp = nn.Sequential(nn.Linear(256, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.blocks = nn.ModuleList(DiTBlock(dim, heads) for _ in range(layers))
        self.out = nn.Linear(dim, patch * patch * channels)

    def forward(self, x, t):
        b, c, hgt, wid = x.shape
        p = self.patch
        tokens = self.embed(x).flatten(2).transpose(1, 2)
        # 2-D sine positions, made for this resolution on every call.
        pos = timestep_embedding(torch.arange(tokens.shape[1], device=x.device), tokens.shape[2])
        tokens = tokens + pos
        cond = self.t_mlp(timestep_embedding(t, 256))
        for blk in self.blocks:
            tokens = blk(tokens, cond)
        y = self.out(tokens).view(b, hgt // p, wid // p, p, p, c)
        return y.permute(0, 5, 1, 3, 2, 4).reshape(b, c, hgt, wid)


def build_dit_multires(device, seed=0):
    """DiT-B/2 (12 x 768) diffusion training on latents of 32, 48, 64 or 80 px (256..640 px
    images), the batch smaller as the resolution grows (32, 16, 8, 6), drawn every step."""
    model = DiT().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)

    def step():
        side, b = rng.choice(((32, 32), (48, 16), (64, 8), (80, 6)))
        x = torch.randn(b, 4, side, side, device=device)
        noise = torch.randn_like(x)
        t = torch.randint(0, 1000, (b,), device=device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.mse_loss(model(x + noise, t).float(), noise)
        loss.backward()
        opt.step()

    step.reseed = rng.seed
    return step


class ResBlock(nn.Module):
    def __init__(self, i, o, temb):
        super().__init__()
        self.n1, self.n2 = nn.GroupNorm(32, i), nn.GroupNorm(32, o)
        self.c1, self.c2 = nn.Conv2d(i, o, 3, padding=1), nn.Conv2d(o, o, 3, padding=1)
        self.t = nn.Linear(temb, o)
        self.skip = nn.Conv2d(i, o, 1) if i != o else nn.Identity()

    def forward(self, x, temb):
        h = self.c1(F.silu(self.n1(x))) + self.t(temb)[:, :, None, None]
        return self.skip(x) + self.c2(F.silu(self.n2(h)))


class SpatialAttn(nn.Module):
    """Self-attention then cross-attention to the text context, over the pixels of a level."""

    def __init__(self, ch, ctx_dim, heads=8):
        super().__init__()
        self.heads = heads
        self.norm = nn.GroupNorm(32, ch)
        self.qkv, self.o1 = nn.Linear(ch, 3 * ch), nn.Linear(ch, ch)
        self.q, self.kv, self.o2 = nn.Linear(ch, ch), nn.Linear(ctx_dim, 2 * ch), nn.Linear(ch, ch)

    def heads_of(self, y, b):
        return y.view(b, -1, self.heads, y.shape[-1] // self.heads).transpose(1, 2)

    def forward(self, x, ctx):
        b, c, hgt, wid = x.shape
        y = self.norm(x).flatten(2).transpose(1, 2)
        q, k, v = (self.heads_of(z, b) for z in self.qkv(y).chunk(3, -1))
        y = y + self.o1(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, -1, c))
        k, v = (self.heads_of(z, b) for z in self.kv(ctx).chunk(2, -1))
        a = F.scaled_dot_product_attention(self.heads_of(self.q(y), b), k, v)
        y = y + self.o2(a.transpose(1, 2).reshape(b, -1, c))
        return x + y.transpose(1, 2).reshape(b, c, hgt, wid)


class CondUNet(nn.Module):
    """Text-conditioned latent diffusion UNet: levels of 128, 256, 512 channels, attention at
    the two lower levels."""

    def __init__(self, ch=128, ctx_dim=768):
        super().__init__()
        chs = (ch, 2 * ch, 4 * ch)
        temb = 4 * ch
        self.t_mlp = nn.Sequential(nn.Linear(ch, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.inp = nn.Conv2d(4, ch, 3, padding=1)
        self.down = nn.ModuleList(ResBlock(i, o, temb) for i, o in zip((ch,) + chs[:-1], chs))
        self.dattn = nn.ModuleList((nn.Identity(), SpatialAttn(chs[1], ctx_dim), SpatialAttn(chs[2], ctx_dim)))
        self.mid = ResBlock(chs[2], chs[2], temb)
        self.up = nn.ModuleList(ResBlock(2 * c, o, temb) for c, o in zip(chs[::-1], chs[::-1][1:] + (ch,)))
        self.uattn = nn.ModuleList((SpatialAttn(chs[1], ctx_dim), SpatialAttn(ch, ctx_dim), nn.Identity()))
        self.out = nn.Sequential(nn.GroupNorm(32, ch), nn.SiLU(), nn.Conv2d(ch, 4, 3, padding=1))

    def forward(self, x, t, ctx):
        temb = self.t_mlp(timestep_embedding(t, self.inp.out_channels).to(x.dtype))
        x = self.inp(x)
        skips = []
        for i, (blk, attn) in enumerate(zip(self.down, self.dattn)):
            x = blk(x, temb)
            x = x if isinstance(attn, nn.Identity) else attn(x, ctx)
            skips.append(x)
            if i < len(self.down) - 1:
                x = F.avg_pool2d(x, 2)
        x = self.mid(x, temb)
        for i, (blk, attn) in enumerate(zip(self.up, self.uattn)):
            x = blk(torch.cat([x, skips.pop()], 1), temb)
            x = x if isinstance(attn, nn.Identity) else attn(x, ctx)
            if i < len(self.up) - 1:
                x = F.interpolate(x, scale_factor=2)
        return self.out(x)


def build_unet_infer(device, seed=0):
    """Latent-diffusion UNet inference, fp16, classifier-free guidance (batch 2 per image): per
    step one image at a latent side of 48..128 px, 10 denoising steps."""
    model = CondUNet().to(device).half().eval()
    rng = random.Random(seed)

    @torch.inference_mode()
    def step():
        side = rng.choice((48, 64, 80, 96, 112, 128))
        x = torch.randn(1, 4, side, side, device=device, dtype=torch.half)
        ctx = torch.randn(2, 77, 768, device=device, dtype=torch.half)
        for k in range(10):
            t = torch.full((2,), 999 - 100 * k, device=device)
            eps = model(torch.cat([x, x]), t, ctx)
            uncond, cond = eps.chunk(2)
            x = x - 0.1 * (uncond + 7.5 * (cond - uncond))

    step.reseed = rng.seed
    return step


class ViT(nn.Module):
    """ViT-B/16 with positions interpolated to the input's resolution."""

    def __init__(self, dim=768, layers=12, heads=12, patch=16):
        super().__init__()
        from corpus_workloads import Block

        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.pos = nn.Parameter(torch.zeros(1, dim, 14, 14))
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, 1000)

    def forward(self, img):
        x = self.embed(img)
        x = x + F.interpolate(self.pos, size=x.shape[2:], mode="bilinear")
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x.flatten(2).transpose(1, 2)], 1)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x[:, 0]))


def build_vit_multires(device, seed=0):
    """ViT-B/16 classification training at 160, 224, 288 or 384 px drawn every step, with the
    batch 96, 64, 32 or 16 (roughly constant tokens, shapes that never repeat in a row)."""
    model = ViT().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)

    def step():
        side, b = rng.choice(((160, 96), (224, 64), (288, 32), (384, 16)))
        img = torch.randn(b, 3, side, side, device=device)
        labels = torch.randint(0, 1000, (b,), device=device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(img).float(), labels)
        loss.backward()
        opt.step()

    step.reseed = rng.seed
    return step


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.ln = nn.LayerNorm(dim)
        self.up, self.down = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.gamma * self.down(F.gelu(self.up(self.ln(y))))
        return x + y.permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    """ConvNeXt-T: stages of 3, 3, 9, 3 blocks at 96, 192, 384, 768 channels."""

    def __init__(self, depths=(3, 3, 9, 3), dims=(96, 192, 384, 768)):
        super().__init__()
        layers = [nn.Conv2d(3, dims[0], 4, stride=4)]
        for i, (depth, dim) in enumerate(zip(depths, dims)):
            if i:
                layers += [nn.GroupNorm(1, dims[i - 1]), nn.Conv2d(dims[i - 1], dim, 2, stride=2)]
            layers += [ConvNeXtBlock(dim) for _ in range(depth)]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(dims[-1], 1000)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


def build_convnext_train(device, seed=0):
    """ConvNeXt-T classification training, channels-last, batch 48 at 192, 224 or 256 px
    (random-resized-crop sizes) drawn every step."""
    model = ConvNeXt().to(device, memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)

    def step():
        side = rng.choice((192, 224, 256))
        img = torch.randn(48, 3, side, side, device=device).contiguous(memory_format=torch.channels_last)
        labels = torch.randint(0, 1000, (48,), device=device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(img).float(), labels)
        loss.backward()
        opt.step()

    step.reseed = rng.seed
    return step


class VideoVAEDecoder(nn.Module):
    """3-D convolution decoder: 16 latent channels to RGB, 8x upsampled in space."""

    def __init__(self, ch=128):
        super().__init__()
        self.inp = nn.Conv3d(16, 4 * ch, 3, padding=1)
        stages = []
        for i, o in ((4 * ch, 4 * ch), (4 * ch, 2 * ch), (2 * ch, ch)):
            stages.append(nn.ModuleList((nn.GroupNorm(32, i), nn.Conv3d(i, o, 3, padding=1))))
        self.stages = nn.ModuleList(stages)
        self.out = nn.Conv3d(ch, 3, 3, padding=1)

    def forward(self, z):
        x = self.inp(z)
        for norm, conv in self.stages:
            x = conv(F.silu(norm(x)))
            x = F.interpolate(x, scale_factor=(1, 2, 2))
        return self.out(x)


def build_framepack(device, seed=0):
    """FramePack-like image-to-video: per video (latent 32x48, 40x64 or 48x80, i.e. 256..384 x
    384..640 px), a text encoder (8 x 1024), a 16 x 1536 video transformer and a 3-D VAE decoder
    are each moved to the GPU, run, and moved back, in turn; the transformer denoises 3 sections
    of 4 latent frames each with a packed context of earlier frames, the VAE decodes each."""
    from corpus_workloads import Block

    text = nn.ModuleList(Block(1024, 16) for _ in range(8)).half()
    dit = nn.ModuleDict(
        dict(
            inp=nn.Linear(16 * 4, 1536),
            ctx=nn.Linear(1024, 1536),
            blocks=nn.ModuleList(Block(1536, 24, cross=True) for _ in range(16)),
            out=nn.Linear(1536, 16 * 4),
        )
    ).half()
    vae = VideoVAEDecoder().half()
    rng = random.Random(seed)

    def patchify(z):
        b, c, f, h, w = z.shape
        return z.view(b, c, f, h // 2, 2, w // 2, 2).permute(0, 2, 3, 5, 1, 4, 6).reshape(b, -1, c * 4)

    def unpatchify(x, f, h, w):
        return x.view(1, f, h // 2, w // 2, 16, 2, 2).permute(0, 4, 1, 2, 5, 3, 6).reshape(1, 16, f, h, w)

    @torch.no_grad()  # not inference_mode: the models' .to() moves run inside it
    def step():
        h, w = rng.choice(((32, 48), (40, 64), (48, 80)))
        text.to(device)
        prompt = torch.randn(1, rng.randint(40, 226), 1024, device=device, dtype=torch.half)
        for blk in text:
            prompt = blk(prompt)
        text.to("cpu")
        history = torch.randn(1, 16, 1, h, w, device=device, dtype=torch.half)  # the input image
        frames = []
        for _ in range(3):
            dit.to(device)
            ctx = dit["ctx"](prompt)
            # Packed context: the latest frame at full size, older ones pooled 2x2 in space.
            recent = history[:, :, -1:]
            older = F.avg_pool3d(history, (1, 2, 2)).repeat_interleave(2, -1).repeat_interleave(2, -2)
            z = torch.randn(1, 16, 4, h, w, device=device, dtype=torch.half)
            for _ in range(6):
                packed = torch.cat([older, recent, z], 2)
                x = dit["inp"](patchify(packed))
                for blk in dit["blocks"]:
                    x = blk(x, ctx)
                eps = unpatchify(dit["out"](x), packed.shape[2], h, w)[:, :, -4:]
                z = z - 0.15 * eps
            dit.to("cpu")
            history = torch.cat([history, z], 2)
            vae.to(device)
            frames.append(vae(z).cpu())
            vae.to("cpu")

    step.reseed = rng.seed
    return step


def gan_pair(px, z=128):
    """A DCGAN generator (z -> px x px x 3, transposed convolutions from 512 channels down) and
    its discriminator (strided convolutions back up), for px a power of two from 32."""
    ups = int(math.log2(px // 4))
    chans = [min(512, 32 << (ups - i)) for i in range(ups + 1)]
    g = [nn.ConvTranspose2d(z, chans[0], 4, 1, 0), nn.BatchNorm2d(chans[0]), nn.ReLU()]
    for a, b in zip(chans, chans[1:]):
        g += [nn.ConvTranspose2d(a, b, 4, 2, 1), nn.BatchNorm2d(b), nn.ReLU()]
    g += [nn.Conv2d(chans[-1], 3, 3, 1, 1), nn.Tanh()]
    d = [nn.Conv2d(3, chans[-1], 3, 1, 1), nn.LeakyReLU(0.2)]
    for a, b in zip(chans[::-1], chans[::-1][1:]):
        d += [nn.Conv2d(a, b, 4, 2, 1), nn.BatchNorm2d(b), nn.LeakyReLU(0.2)]
    d += [nn.Conv2d(chans[0], 1, 4, 1, 0), nn.Flatten()]
    return nn.Sequential(*g), nn.Sequential(*d)


def build_gan_train(device, seed=0):
    """Two DCGANs trained in turn, at 64 and at 128 px (generator and discriminator of 32..512
    channels each), batch 32..128 a step, one discriminator and one generator update a step,
    Adam, bf16 autocast. Added 2026-11-26 (session 13), after the pool's constants of that day
    were set."""
    rng = random.Random(seed)
    pairs = {}
    for px in (64, 128):
        g, d = gan_pair(px)
        g, d = g.to(device), d.to(device)
        pairs[px] = (g, d, torch.optim.Adam(g.parameters(), 2e-4, betas=(0.5, 0.999)),
                     torch.optim.Adam(d.parameters(), 2e-4, betas=(0.5, 0.999)))

    def step():
        px, batch = rng.choice((64, 128)), rng.choice((32, 64, 96, 128))
        g, d, opt_g, opt_d = pairs[px]
        real = torch.randn(batch, 3, px, px, device=device).clamp(-1, 1)
        z = torch.randn(batch, 128, 1, 1, device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            fake = g(z)
            loss_d = F.softplus(-d(real)).mean() + F.softplus(d(fake.detach())).mean()
        opt_d.zero_grad(set_to_none=True)
        loss_d.backward()
        opt_d.step()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss_g = F.softplus(-d(fake)).mean()
        opt_g.zero_grad(set_to_none=True)
        loss_g.backward()
        opt_g.step()

    step.reseed = rng.seed
    return step


def build_cnn_serve(device, seed=0):
    """A ResNet-18 classifier (torchvision's layout, random weights, fp16) answering requests
    one batch at a time: 1..48 images of 96..320 px a request, 24 requests a step, no grad: a
    small program whose peak is its activations. Added 2026-11-26 (session 13), after the
    pool's constants of that day were set."""
    import torchvision

    model = torchvision.models.resnet18(weights=None).to(device).half().eval()
    rng = random.Random(seed)

    @torch.no_grad()
    def step():
        for _ in range(24):
            batch, side = rng.randrange(1, 49), rng.randrange(96, 321, 32)
            model(torch.randn(batch, 3, side, side, device=device, dtype=torch.half)).argmax(-1)

    step.reseed = rng.seed
    return step


def conv_block(a, b):
    """Two 3x3 convolutions with batch norm and ReLU."""
    return nn.Sequential(nn.Conv2d(a, b, 3, padding=1), nn.BatchNorm2d(b), nn.ReLU(inplace=True),
                         nn.Conv2d(b, b, 3, padding=1), nn.BatchNorm2d(b), nn.ReLU(inplace=True))


class SegNet(nn.Module):
    """A small segmentation UNet: levels of 32, 64, 128, 256 channels, skips concatenated."""

    def __init__(self, classes=21, chans=(32, 64, 128, 256)):
        super().__init__()
        self.down = nn.ModuleList(conv_block(a, b) for a, b in zip((3,) + chans, chans))
        self.up = nn.ModuleList(conv_block(hi + lo, lo) for hi, lo in zip(chans[:0:-1], chans[-2::-1]))
        self.head = nn.Conv2d(chans[0], classes, 1)

    def forward(self, x):
        skips = []
        for i, blk in enumerate(self.down):
            x = blk(F.max_pool2d(x, 2) if i else x)
            skips.append(x)
        for blk, skip in zip(self.up, skips[-2::-1]):
            x = blk(torch.cat([F.interpolate(x, scale_factor=2), skip], 1))
        return self.head(x)


def build_seg_infer(device, seed=0):
    """SegNet inference, fp16, 12 requests a step of 1..4 images at 256..768 px (multiples of
    64) each, the class map taken: a program whose peak (1.5 GiB on the H100) is its
    activations. TUNE half, added 2026-11-26 (session 14); its half was fixed before it was
    first recorded."""
    model = SegNet().to(device).half().eval()
    rng = random.Random(seed)

    @torch.inference_mode()
    def step():
        for _ in range(12):
            batch, side = rng.randrange(1, 5), rng.randrange(256, 769, 64)
            model(torch.randn(batch, 3, side, side, device=device, dtype=torch.half)).argmax(1)

    step.reseed = rng.seed
    return step


class Pyramid(nn.Module):
    """A ResNet's features (torchvision's layout) at strides 8, 16 and 32 and a top-down pyramid
    of `width` channels over them: the trunk of both detectors."""

    def __init__(self, resnet, width):
        super().__init__()
        r = resnet(weights=None)
        self.stem = nn.Sequential(r.conv1, r.bn1, r.relu, r.maxpool, r.layer1, r.layer2)
        self.c4, self.c5 = r.layer3, r.layer4
        self.lat = nn.ModuleList(nn.Conv2d(c, width, 1) for c in (128, 256, 512))

    def pyramid(self, x):
        """The levels at strides 8, 16 and 32."""
        c3 = self.stem(x)
        c4 = self.c4(c3)
        c5 = self.c5(c4)
        p5 = self.lat[2](c5)
        p4 = self.lat[1](c4) + F.interpolate(p5, size=c4.shape[2:])
        p3 = self.lat[0](c3) + F.interpolate(p4, size=c3.shape[2:])
        return p3, p4, p5


class Detector(Pyramid):
    """ResNet-18 features at strides 8, 16 and 32, a top-down pyramid of 128 channels and a
    shared head of 9 anchors x (4 box + 20 class) outputs per level."""

    def __init__(self):
        import torchvision

        super().__init__(torchvision.models.resnet18, 128)
        self.head = nn.Sequential(conv_block(128, 128), nn.Conv2d(128, 9 * 24, 3, padding=1))

    def forward(self, x):
        return [self.head(p) for p in self.pyramid(x)]


def build_det_multiscale(device, seed=0):
    """Detector training at a side drawn every step from 320..640 px (multiples of 32), batch
    8, bf16 autocast, SGD with momentum, a regression loss on every output against random
    targets. REPORT half, added 2026-11-26 (session 14) before the pool was changed that day."""
    model = Detector().to(device)
    opt = torch.optim.SGD(model.parameters(), 0.01, momentum=0.9)
    rng = random.Random(seed)

    def step():
        side = rng.randrange(320, 641, 32)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            outs = model(torch.randn(8, 3, side, side, device=device))
            loss = sum(F.smooth_l1_loss(o.float(), torch.randn_like(o, dtype=torch.float)) for o in outs)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step.reseed = rng.seed
    return step


class VaeResBlock(nn.Module):
    """Group-normed residual block of a latent-diffusion VAE."""

    def __init__(self, a, b):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(32, a), nn.Conv2d(a, b, 3, padding=1)
        self.n2, self.c2 = nn.GroupNorm(32, b), nn.Conv2d(b, b, 3, padding=1)
        self.skip = nn.Conv2d(a, b, 1) if a != b else nn.Identity()

    def forward(self, x):
        h = self.c1(F.silu(self.n1(x)))
        return self.skip(x) + self.c2(F.silu(self.n2(h)))


def vae_decoder():
    """A Stable-Diffusion-like VAE decoder: 4 latent channels up 8x, through 512, 512, 256, 128
    channels, three residual blocks a level."""
    layers, a = [nn.Conv2d(4, 512, 3, padding=1), VaeResBlock(512, 512)], 512
    for i, b in enumerate((512, 512, 256, 128)):
        layers += [VaeResBlock(a, b), VaeResBlock(b, b), VaeResBlock(b, b)]
        if i < 3:
            layers += [nn.Upsample(scale_factor=2), nn.Conv2d(b, b, 3, padding=1)]
        a = b
    return nn.Sequential(*layers, nn.GroupNorm(32, 128), nn.SiLU(), nn.Conv2d(128, 3, 3, padding=1))


def build_vae_decode(device, seed=0):
    """The VAE decoder, fp16, decoding 2 latents a step of 32..96 px (256..768 px images) one
    at a time: few weights, activations of up to a few hundred MiB each. REPORT half, added
    2026-11-26 (session 14) before the pool was changed that day."""
    model = vae_decoder().to(device).half().eval()
    rng = random.Random(seed)

    @torch.inference_mode()
    def step():
        for _ in range(2):
            side = rng.randrange(32, 97, 8)
            model(torch.randn(1, 4, side, side, device=device, dtype=torch.half)).clamp(-1, 1)

    step.reseed = rng.seed
    return step


class RrdbLite(nn.Module):
    """An ESRGAN-like 4x super-resolver: residual-in-residual dense blocks of 64 channels (growth
    32) at the input's size, then two nearest-neighbour 2x upsamplings with convolutions."""

    def __init__(self, ch=64, growth=32, blocks=6):
        super().__init__()

        def dense():
            return nn.ModuleList(nn.Conv2d(ch + i * growth, growth if i < 4 else ch, 3, padding=1) for i in range(5))

        self.inp = nn.Conv2d(3, ch, 3, padding=1)
        self.blocks = nn.ModuleList(nn.ModuleList(dense() for _ in range(3)) for _ in range(blocks))
        self.up = nn.ModuleList(nn.Conv2d(ch, ch, 3, padding=1) for _ in range(2))
        self.out = nn.Conv2d(ch, 3, 3, padding=1)

    def forward(self, x):
        x = feat = self.inp(x)
        for rrdb in self.blocks:
            y = x
            for convs in rrdb:
                feats = [y]
                for i, c in enumerate(convs):
                    z = c(torch.cat(feats, 1))
                    feats.append(F.leaky_relu(z, 0.2) if i < 4 else z)
                y = y + 0.2 * feats[-1]
            x = x + 0.2 * y
        x = x + feat
        for c in self.up:
            x = F.leaky_relu(c(F.interpolate(x, scale_factor=2)), 0.2)
        return self.out(x)


def build_sr_upscale(device, seed=0):
    """4x super-resolution inference, fp16: 3 images a step, each 96..384 px high and wide
    (drawn apart, multiples of 16), one at a time: a small model whose activations (up to
    300 MiB a tensor at the output's size) set the peak, at a new size per image. TUNE half,
    added 2026-11-27 (session 21) with the shapes of the REPORT traces plain segments fail on
    (activations at a new size per image); its half was fixed before it was first recorded."""
    model = RrdbLite().to(device).half().eval()
    rng = random.Random(seed)

    @torch.inference_mode()
    def step():
        for _ in range(3):
            h, w = rng.randrange(96, 385, 16), rng.randrange(96, 385, 16)
            model(torch.rand(1, 3, h, w, device=device, dtype=torch.half)).clamp(0, 1)

    step.reseed = rng.seed
    return step


class Fcos(Pyramid):
    """An FCOS-like detector: ResNet-34 features at strides 8..32, a 256-channel pyramid with
    two more levels (strides 64, 128), and group-normed class and box towers shared by the five
    levels."""

    def __init__(self, classes=80):
        import torchvision

        super().__init__(torchvision.models.resnet34, 256)
        self.smooth = nn.ModuleList(nn.Conv2d(256, 256, 3, padding=1) for _ in range(3))
        self.p6, self.p7 = nn.Conv2d(256, 256, 3, stride=2, padding=1), nn.Conv2d(256, 256, 3, stride=2, padding=1)

        def tower(out):
            layers = []
            for _ in range(4):
                layers += [nn.Conv2d(256, 256, 3, padding=1), nn.GroupNorm(32, 256), nn.ReLU()]
            return nn.Sequential(*layers, nn.Conv2d(256, out, 3, padding=1))

        self.cls, self.box = tower(classes), tower(5)

    def forward(self, x):
        p3, p4, p5 = (s(p) for s, p in zip(self.smooth, self.pyramid(x)))
        p6 = self.p6(p5)
        p7 = self.p7(F.relu(p6))
        return [(self.cls(p), self.box(p)) for p in (p3, p4, p5, p6, p7)]


def build_fcos_train(device, seed=0):
    """FCOS-like detector training, batch 4 at a height and a width drawn apart every step from
    384..800 px (multiples of 32), fp16 autocast with a gradient scaler, AdamW, focal-like and
    regression losses on every level against random targets. TUNE half, added 2026-11-27
    (session 21) with the shapes of the REPORT traces plain segments fail on (feature levels
    whose sizes change together every step); its half was fixed before it was first
    recorded."""
    model = Fcos().to(device)
    opt = torch.optim.AdamW(model.parameters(), 1e-4)
    scaler = torch.amp.GradScaler("cuda", enabled=device.type == "cuda")
    rng = random.Random(seed)

    def step():
        h, w = rng.randrange(384, 801, 32), rng.randrange(384, 801, 32)
        with torch.autocast(device.type, dtype=torch.float16, enabled=device.type == "cuda"):
            outs = model(torch.randn(4, 3, h, w, device=device))
            loss = sum(F.binary_cross_entropy_with_logits(c.float(), torch.rand_like(c, dtype=torch.float))
                       + F.smooth_l1_loss(b.float(), torch.randn_like(b, dtype=torch.float)) for c, b in outs)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    step.reseed = rng.seed
    return step


CORPUS = {
    "dit_multires": (build_dit_multires, 12),
    "unet_infer": (build_unet_infer, 6),
    "vit_multires": (build_vit_multires, 16),
    "convnext_train": (build_convnext_train, 10),
    "framepack": (build_framepack, 3),
    "gan_train": (build_gan_train, 12),
    "cnn_serve": (build_cnn_serve, 8),
    "seg_infer": (build_seg_infer, 8),
    # The same program for 40 steps: on the H100 its peak reserved reached 1.052 of its peak
    # live there against 1.036 over 8 (session 15), so the longer run is a trace of its own.
    "seg_infer_long": (build_seg_infer, 40),
    "det_multiscale": (build_det_multiscale, 10),
    "vae_decode": (build_vae_decode, 6),
    "sr_upscale": (build_sr_upscale, 6),
    "fcos_train": (build_fcos_train, 8),
}
