#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on a GPU: the peer of ember's fused attention.

Times torch.nn.functional.scaled_dot_product_attention forward and forward + backward at
the shapes FlashAttention-2's paper reports (batch x sequence = 16k tokens, 16 heads of
128 for a 2048-wide model), with each of PyTorch's backends it has (flash, cuDNN,
efficient, math), and prints one JSON line per case with TFLOP/s counted as
FlashAttention's benchmarks count them: forward 4 B H T^2 D (half where causal), backward
2.5 times the forward. CUDA events, median of --repeat runs after --warmup.

    python3 bench/peers/attention_peer.py [--dtype bf16] [--seqlens 1024,4096] [--causal 0,1]
"""
import argparse
import contextlib
import json
import statistics

import torch
import torch.nn.functional as F


def timed(fn, warmup, repeat):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def backends():
    """(name, context manager factory) for each SDPA backend this PyTorch has."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # PyTorch < 2.3
        return [("default", contextlib.nullcontext)]
    out = []
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION", "MATH"):
        if hasattr(SDPBackend, name):
            out.append((name.lower(), lambda b=getattr(SDPBackend, name): sdpa_kernel([b])))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "f16"])
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=16384, help="batch x sequence length")
    parser.add_argument("--seqlens", default="1024,4096")
    parser.add_argument("--causal", default="0,1")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("attention_peer.py: no CUDA device")
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    device = torch.device("cuda")
    for T in (int(s) for s in args.seqlens.split(",")):
        B, H, D = max(1, args.tokens // T), args.heads, args.head_dim
        q, k, v = (torch.randn(B, H, T, D, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
        dout = torch.randn(B, H, T, D, device=device, dtype=dtype)
        for causal in (bool(int(c)) for c in args.causal.split(",")):
            fwd_flops = 4.0 * B * H * T * T * D * (0.5 if causal else 1.0)
            for name, ctx in backends():
                try:
                    with ctx():
                        fwd = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                    args.warmup, args.repeat)

                        def step():
                            out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            out.backward(dout)
                            q.grad = k.grad = v.grad = None

                        both = timed(step, args.warmup, args.repeat)
                except RuntimeError as e:  # this backend refuses the shape or the GPU
                    print(json.dumps({"backend": name, "T": T, "causal": causal, "error": str(e).splitlines()[0]}))
                    continue
                bwd = max(both - fwd, 1e-12)
                print(json.dumps({
                    "peer": "pytorch " + torch.__version__, "backend": name, "dtype": args.dtype,
                    "B": B, "H": H, "T": T, "D": D, "causal": causal,
                    "fwd_ms": round(fwd * 1e3, 4), "bwd_ms": round(bwd * 1e3, 4),
                    "fwd_tflops": round(fwd_flops / fwd / 1e12, 1),
                    "bwd_tflops": round(2.5 * fwd_flops / bwd / 1e12, 1),
                    "gpu": torch.cuda.get_device_name(),
                }), flush=True)


if __name__ == "__main__":
    main()
