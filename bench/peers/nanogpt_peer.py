#!/usr/bin/env python3
"""ember_gpt's PyTorch peer: nanoGPT's model and training loop on the same text and split.

Usage: bench/peers/nanogpt_peer.py [--preset cpu|gpu] [--iters N] [--threads N] [--seed N]
       [--device cpu|cuda] [--data FILE] [--eval-interval N] [--eval-iters N] ...

The model is nanoGPT's model.py (karpathy/nanoGPT: GPT, Block, CausalSelfAttention, MLP,
LayerNorm with an optional bias; bias=False here, as its shakespeare_char config), its
initialisation (normal 0.02, c_proj 0.02/sqrt(2 n_layer)) and the weight tying of wte and
lm_head. Training is train.py's: AdamW, betas (0.9, 0.99), warmup then cosine decay
(get_lr), gradient clipping at 1.0, estimate_loss every eval_interval iterations. Two
choices follow ember_gpt (examples/gpt) rather than nanoGPT, so the two compute the same
thing: the weight decay is off for the embeddings (nanoGPT decays every 2-D tensor, the
tied wte included; issue 31 asks for decay on the matmul weights only), and each
evaluation draws its batches from a generator seeded afresh (seed + 1), so every
evaluation sees the same batches. The text is Debian's King James Version
(`bible -l80 gen1:1-rev22:21`) or --data, one token per byte, the vocabulary its sorted
distinct bytes, the first 90% training text.

Runs with Debian's python3-torch 1.13 on the CPU (attention written out with a causal
mask, as nanoGPT does without flash attention) and with PyTorch 2.x anywhere
(F.scaled_dot_product_attention, is_causal), --device cuda included. Prints progress and
ends with one JSON line: ms_per_iter (training iterations only, evaluations excluded, as
ember_gpt measures), val_loss and train_loss at the end, and what ran.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn as nn
from torch.nn import functional as F

BIBLE = ["bible", "-l80", "gen1:1-rev22:21"]
PRESETS = {
    "cpu": dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12, dropout=0.0, iters=2000, eval_iters=20),
    "gpu": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, batch_size=64, dropout=0.2, iters=5000, eval_iters=200),
}


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (nanoGPT's: PyTorch's has no bias=False)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=False)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=False)
        self.attn_dropout = nn.Dropout(c.dropout)
        self.resid_dropout = nn.Dropout(c.dropout)
        self.n_head, self.n_embd, self.dropout = c.n_head, c.n_embd, c.dropout
        self.flash = hasattr(F, "scaled_dot_product_attention")
        if not self.flash:
            self.register_buffer("bias", torch.tril(torch.ones(c.block_size, c.block_size))
                                 .view(1, 1, c.block_size, c.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                               dropout_p=self.dropout if self.training else 0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=False)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=False)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = LayerNorm(c.n_embd, bias=False)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = LayerNorm(c.n_embd, bias=False)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.vocab_size, c.n_embd),
            wpe=nn.Embedding(c.block_size, c.n_embd),
            drop=nn.Dropout(c.dropout),
            h=nn.ModuleList([Block(c) for _ in range(c.n_layer)]),
            ln_f=LayerNorm(c.n_embd, bias=False),
        ))
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        T = idx.size(1)
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    def param_groups(self, weight_decay):
        """AdamW's groups as ember_gpt's: decay for the Linear weights, not for the embeddings and norms."""
        embeddings = {id(self.transformer.wte.weight), id(self.transformer.wpe.weight)}
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2 and id(p) not in embeddings]
        no_decay = [p for p in params if p.dim() < 2 or id(p) in embeddings]
        return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def load_text(path):
    if path:
        with open(path, "rb") as f:
            return f.read()
    return subprocess.run(BIBLE, check=True, capture_output=True).stdout


def get_batch(data, batch_size, block_size, gen, device):
    ix = torch.randint(len(data) - block_size, (batch_size,), generator=gen)
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x.to(device), y.to(device)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=list(PRESETS), default="cpu")
    for name in ["n_layer", "n_head", "n_embd", "block_size", "batch_size", "iters", "eval_iters"]:
        p.add_argument("--" + name.replace("_", "-"), type=int)
    p.add_argument("--dropout", type=float)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup-iters", type=int, default=100)
    p.add_argument("--lr-decay-iters", type=int, help="default: --iters")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--eval-interval", type=int, default=250)
    p.add_argument("--log-interval", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: PyTorch's default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--data", default="", help="a text file (default: the King James Version from `bible`)")
    a = p.parse_args()
    for k, v in PRESETS[a.preset].items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.lr_decay_iters is None:
        a.lr_decay_iters = max(a.iters, 1)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    device = torch.device(a.device)

    text = load_text(a.data)
    vocab = sorted(set(text))
    stoi = {b: i for i, b in enumerate(vocab)}
    ids = torch.tensor([stoi[b] for b in text], dtype=torch.long)
    n = len(ids) * 9 // 10
    train_data, val_data = ids[:n], ids[n:]
    a.vocab_size = len(vocab)

    model = GPT(a).to(device)
    opt = torch.optim.AdamW(model.param_groups(a.weight_decay), lr=a.lr, betas=(a.beta1, a.beta2))
    data_gen = torch.Generator().manual_seed(a.seed)

    def get_lr(it):
        if it < a.warmup_iters:
            return a.lr * (it + 1) / (a.warmup_iters + 1)
        if it > a.lr_decay_iters:
            return a.min_lr
        ratio = (it - a.warmup_iters) / max(1, a.lr_decay_iters - a.warmup_iters)
        return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (a.lr - a.min_lr)

    @torch.no_grad()
    def estimate_loss():
        model.eval()
        out = {}
        for split, data in (("train", train_data), ("val", val_data)):
            gen = torch.Generator().manual_seed(a.seed + 1)
            losses = [model(*get_batch(data, a.batch_size, a.block_size, gen, device)).item()
                      for _ in range(a.eval_iters)]
            out[split] = sum(losses) / len(losses)
        model.train()
        return out

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    train_time, steps, losses = 0.0, 0, {}
    t0 = time.perf_counter()
    it = 0
    while True:
        if it % a.eval_interval == 0 or it == a.iters:
            sync()
            train_time += time.perf_counter() - t0
            losses = estimate_loss()
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", flush=True)
            t0 = time.perf_counter()
        if it >= a.iters:
            break
        for g in opt.param_groups:
            g["lr"] = get_lr(it)
        x, y = get_batch(train_data, a.batch_size, a.block_size, data_gen, device)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        steps += 1
        it += 1
        if it % a.log_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}", flush=True)
    ms = 1e3 * train_time / max(steps, 1)
    print(json.dumps({"model": "nanogpt-pytorch", "val_loss": losses["val"], "train_loss": losses["train"],
                      "ms_per_iter": ms, "steps": steps, "iters": a.iters, "threads": torch.get_num_threads(),
                      "device": str(device), "torch": torch.__version__, "seed": a.seed, "preset": a.preset,
                      "vocab_size": a.vocab_size,
                      "num_params": sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()}))


if __name__ == "__main__":
    sys.exit(main())
