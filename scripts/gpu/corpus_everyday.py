#!/usr/bin/env python3
"""Workloads of the trace corpus written in session 30 as REPORT traces, their half fixed in
data/traces/corpus.tsv before they were recorded (see corpus_workloads.py for the contract):
habits of everyday programs that none of the corpus had. A training loop that keeps each
step's loss on the GPU and evaluates at another batch size; reinforcement learning that
appends every rollout step's tensors to lists; a vision-language model that turns a varying
number of image tiles into prompt tokens; an optimizer whose matrix roots take cuSOLVER's work
areas from PyTorch's allocator. Every size comes from the step's own `random.Random`."""

import random

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus_serving import GqaLM


class ViT(nn.Module):
    """A ViT (pre-norm encoder layers of PyTorch's own) over patches of `patch` px; `forward`
    gives the class logits, `tokens` the last layer's patch tokens."""

    def __init__(self, dim, heads, layers, patch, classes=1000, side=224):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.pos = nn.Parameter(torch.zeros(1, (side // patch) ** 2, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def tokens(self, x):
        return self.encoder(self.embed(x).flatten(2).transpose(1, 2) + self.pos)

    def forward(self, x):
        return self.head(self.norm(self.tokens(x)).mean(1))


def build_train_eval(device, seed=0):
    """ViT-S/16 classification training (12 x 384, 6 heads) at 224 px, batch 32..96 drawn per
    step, bf16 autocast, AdamW. Each step's loss and accuracy stay on the GPU in lists
    (`losses.append(loss.detach())`, as loops do to avoid a synchronize), stacked for a log
    line every 4 steps and kept; after every third step an evaluation pass under no_grad, 4
    batches of 256. Tiny blocks that live for the whole run are made between the step's
    largest ones, and evaluation's peak comes at another batch size."""
    model = ViT(384, 6, 12, 16).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rng = random.Random(seed)
    losses, accuracies, logs = [], [], []

    def step():
        batch = rng.randint(32, 96)
        x, y = torch.randn(batch, 3, 224, 224, device=device), torch.randint(0, 1000, (batch,), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        accuracies.append((logits.argmax(-1) == y).float().mean())
        if len(losses) % 4 == 0:
            logs.append(torch.stack(losses[-4:]).mean())
        if len(losses) % 3 == 0:
            model.eval()
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                correct = sum((model(torch.randn(256, 3, 224, 224, device=device)).argmax(-1) == 0).sum()
                              for _ in range(4))
            logs.append(correct)
            model.train()

    def reseed(seed):
        # The log and evaluation schedule follows len(losses): it restarts too, so that two
        # blocks of one seed do the same work (inprocess.py).
        rng.seed(seed)
        losses.clear()
        accuracies.clear()

    step.reseed = reseed
    return step


class ActorCritic(nn.Module):
    def __init__(self, obs, actions, width=256):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(obs, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh())
        self.pi, self.v = nn.Linear(width, actions), nn.Linear(width, 1)

    def forward(self, x):
        h = self.body(x)
        return torch.distributions.Categorical(logits=self.pi(h)), self.v(h).squeeze(-1)


def build_ppo_rollout(device, seed=0):
    """PPO over 256..1024 simulated environments on the GPU (random linear dynamics,
    observations of 64, 8 discrete actions): a rollout of 64..256 steps appends each step's
    observation, action, log-probability, value, reward and done flag to lists (small tensors
    made one at a time), stacks them at the end, computes advantages (GAE) backwards step by
    step, then 4 epochs of 8 minibatches update a 2 x 256 actor-critic with Adam. Sizes follow
    the drawn number of environments and rollout length."""
    obs_dim, actions = 64, 8
    model = ActorCritic(obs_dim, actions).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    dynamics = torch.randn(actions, obs_dim, obs_dim, device=device) / obs_dim ** 0.5
    rng = random.Random(seed)

    def step():
        envs, length = rng.randint(256, 1024), rng.randint(64, 256)
        obs = torch.randn(envs, obs_dim, device=device)
        trajectory = {k: [] for k in ("obs", "act", "logp", "value", "reward", "done")}
        with torch.no_grad():
            for _ in range(length):
                dist, value = model(obs)
                act = dist.sample()
                trajectory["obs"].append(obs)
                trajectory["act"].append(act)
                trajectory["logp"].append(dist.log_prob(act))
                trajectory["value"].append(value)
                obs = torch.tanh(torch.bmm(dynamics[act], obs.unsqueeze(2)).squeeze(2))
                trajectory["reward"].append(obs[:, 0])
                done = torch.rand(envs, device=device) < 0.01
                trajectory["done"].append(done.float())
                obs = torch.where(done.unsqueeze(1), torch.randn_like(obs), obs)
            t = {k: torch.stack(v) for k, v in trajectory.items()}
            advantages, running = [], torch.zeros(envs, device=device)
            next_value = model(obs)[1]
            for i in reversed(range(length)):
                delta = t["reward"][i] + 0.99 * next_value * (1 - t["done"][i]) - t["value"][i]
                running = delta + 0.99 * 0.95 * (1 - t["done"][i]) * running
                advantages.append(running)
                next_value = t["value"][i]
            adv = torch.stack(advantages[::-1]).flatten()
            returns = adv + t["value"].flatten()
        flat_obs, flat_act, flat_logp = t["obs"].flatten(0, 1), t["act"].flatten(), t["logp"].flatten()
        for _ in range(4):
            for idx in torch.randperm(len(adv), device=device).chunk(8):
                dist, value = model(flat_obs[idx])
                ratio = (dist.log_prob(flat_act[idx]) - flat_logp[idx]).exp()
                a = (adv[idx] - adv[idx].mean()) / (adv[idx].std() + 1e-8)
                loss = -torch.min(ratio * a, ratio.clamp(0.8, 1.2) * a).mean() + 0.5 * F.mse_loss(value, returns[idx])
                loss = loss - 0.01 * dist.entropy().mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

    step.reseed = rng.seed
    return step


def build_vlm_infer(device, seed=0):
    """LLaVA-like inference, fp16: a ViT-B/14 (12 x 768) encodes 1..6 tiles of 336 px a request
    (dynamic tiling), a 2-layer MLP projects each tile's 576 tokens to the width of a 16 x 2048
    decoder (16 query heads over 4 key/value heads), which prefills them with a 32..512-token
    prompt and samples 16..128 tokens with a KV cache grown by `torch.cat`; 2 requests a step.
    A prefill of up to 3,968 tokens next to caches of a few MiB."""
    vit = ViT(768, 12, 12, 14, side=336).to(device).half().eval()
    project = nn.Sequential(nn.Linear(768, 2048), nn.GELU(), nn.Linear(2048, 2048)).to(device).half().eval()
    lm = GqaLM(32000, 2048, 16, 4, 16, 5632).to(device).half().eval()
    rng = random.Random(seed)

    def sample(logits):
        return torch.multinomial(logits.float().softmax(-1), 1)

    @torch.inference_mode()
    def step():
        for _ in range(2):
            tiles, prompt, new = rng.randint(1, 6), rng.randint(32, 512), rng.randint(16, 128)
            image = project(vit.tokens(torch.randn(tiles, 3, 336, 336, device=device, dtype=torch.half)))
            cache = [None] * len(lm.blocks)
            tok = sample(lm(torch.randint(0, 32000, (1, prompt), device=device), cache, image.reshape(1, -1, 2048)))
            for _ in range(new - 1):
                tok = sample(lm(tok, cache))

    step.reseed = rng.seed
    return step


def build_shampoo_train(device, seed=0):
    """A 6 x 512 language model (vocab 8192) trained with a Shampoo-like optimizer, fp32: for
    every 2-D weight of at most 2048 a side, left and right statistics (G G^T, G^T G) gathered
    every step and their inverse fourth roots recomputed every 4 steps by `torch.linalg.eigh`
    (cuSOLVER's work areas come from PyTorch's allocator), the step grafted to Adam's size;
    Adam for the rest. 4..16 sequences of 128..1024 tokens a step."""
    from corpus_workloads import LM, lm_loss

    model = LM(8192, 512, 8, 6, 1024).to(device)
    shaped = [p for p in model.parameters() if p.dim() == 2 and max(p.shape) <= 2048]
    rest = [p for p in model.parameters() if not any(p is q for q in shaped)]
    adam = torch.optim.Adam(rest, lr=3e-4)
    stats = {p: [torch.zeros(n, n, device=device) for n in p.shape] for p in shaped}
    roots = {p: [torch.eye(n, device=device) for n in p.shape] for p in shaped}
    second = {p: torch.zeros_like(p) for p in shaped}
    rng = random.Random(seed)
    count = [0]

    def inverse_root(m):
        vals, vecs = torch.linalg.eigh(m + 1e-6 * torch.eye(len(m), device=m.device))
        return vecs @ torch.diag(vals.clamp(min=1e-12) ** -0.25) @ vecs.T

    def step():
        count[0] += 1
        batch, length = rng.randint(4, 16), rng.randrange(128, 1025, 64)
        tokens = torch.randint(0, 8192, (batch, length), device=device)
        lm_loss(model(tokens), tokens).backward()
        adam.step()
        with torch.no_grad():
            for p in shaped:
                g = p.grad
                left, right = stats[p]
                left.add_(g @ g.T)
                right.add_(g.T @ g)
                if count[0] % 4 == 1:
                    roots[p] = [inverse_root(left), inverse_root(right)]
                second[p].mul_(0.999).addcmul_(g, g, value=0.001)
                direction = roots[p][0] @ g @ roots[p][1]
                adam_size = (g / (second[p].sqrt() + 1e-8)).norm()
                p.sub_(direction * (3e-4 * adam_size / (direction.norm() + 1e-12)))
        model.zero_grad(set_to_none=True)

    def reseed(seed):
        # The roots' schedule (every 4th step) restarts too, so that two blocks of one seed do
        # the same work (inprocess.py).
        rng.seed(seed)
        count[0] = 0

    step.reseed = reseed
    return step


# name -> (builder, steps recorded). Steps keep a trace near or under 100k rows.
CORPUS = {
    "train_eval": (build_train_eval, 12),
    "ppo_rollout": (build_ppo_rollout, 4),
    "vlm_infer": (build_vlm_infer, 3),
    "shampoo_train": (build_shampoo_train, 12),
}
