#!/usr/bin/python3
"""PyTorch twin of ember's attention tests: writes tests/refcases/attention.safetensors.

Run with Debian's python3-torch (1.13): /usr/bin/python3 tests/refcases/attention_twin.py
CI runs only ember's side (tests/core/test_attention.cpp, tests/layers/test_transformer.cpp).

Everything is float64, seed 0, dropout 0. Each case N stores its inputs, `out`, the upstream
gradient `grad_out` and the gradients of sum(out * grad_out) (plus sum(weights *
grad_weights) where the attention weights are returned) under `caseN.<field>`; module cases
store the module's own parameters as `caseN.param.<state dict name>` and their gradients as
`caseN.grad.<name>`. The metadata `caseN` is a JSON object naming the op and its arguments.

sdpa cases: torch 1.13 has no F.scaled_dot_product_attention, so its math is written out
here as PyTorch 2 documents it (bool mask: true = takes part; float mask: added; is_causal:
the top-left mask ones(L, S).tril()). Module cases use torch.nn's own MultiheadAttention and
Transformer layers, whose masks are the opposite bool convention (true = excluded).
"""
import json
import math
import sys

import torch
import torch.nn.functional as F

from twin_io import write_safetensors

torch.set_num_threads(1)  # the draws and reductions reproduce bit for bit only at one thread
torch.manual_seed(0)
torch.set_default_dtype(torch.float64)

tensors = {}
metadata = {"family": "attention", "generator": "tests/refcases/attention_twin.py (torch %s)" % torch.__version__,
            "seed": "0"}
num_cases = 0


def put(case, name, t):
    tensors["case%d.%s" % (case, name)] = t.detach().contiguous().clone()


def sdpa_twin(q, k, v, attn_mask=None, is_causal=False, scale=None):
    L, S = q.size(-2), k.size(-2)
    s = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = (q * s) @ k.transpose(-2, -1)
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    elif attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    return torch.softmax(scores, -1) @ v


def sdpa_case(meta, q, k, v, attn_mask=None, is_causal=False, scale=None):
    global num_cases
    c = num_cases
    num_cases += 1
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out = sdpa_twin(q, k, v, attn_mask, is_causal, scale)
    g = torch.randn_like(out)
    (out * g).sum().backward()
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out), ("grad_out", g), ("grad_q", q.grad),
                    ("grad_k", k.grad), ("grad_v", v.grad)):
        put(c, name, t)
    if attn_mask is not None:
        put(c, "attn_mask", attn_mask)
    meta.update(op="sdpa", dtype="F64", is_causal=is_causal, scale=scale, has_mask=attn_mask is not None)
    metadata["case%d" % c] = json.dumps(meta)


def keep_some(shape, p=0.6):
    """A bool mask (true = takes part) with at least one true in every row."""
    m = torch.rand(shape) < p
    m[..., 0] = True
    return m


r = torch.randn
sdpa_case({"what": "4-D, no mask, L != S, Ev != E"}, r(2, 3, 5, 4), r(2, 3, 7, 4), r(2, 3, 7, 6))
sdpa_case({"what": "bool mask [L, S] broadcast over batch and heads"}, r(2, 3, 5, 4), r(2, 3, 7, 4), r(2, 3, 7, 6),
          attn_mask=keep_some((5, 7)))
sdpa_case({"what": "float mask [2, 1, L, S]"}, r(2, 3, 5, 4), r(2, 3, 7, 4), r(2, 3, 7, 6), attn_mask=r(2, 1, 5, 7))
sdpa_case({"what": "causal L < S"}, r(2, 5, 4), r(2, 7, 4), r(2, 7, 3), is_causal=True)
sdpa_case({"what": "causal L > S"}, r(2, 7, 4), r(2, 5, 4), r(2, 5, 3), is_causal=True)
sdpa_case({"what": "scale 0.3, broadcast batch dims q [2, 1, L, E] k, v [3, S, E]"}, r(2, 1, 5, 4), r(3, 7, 4),
          r(3, 7, 6), scale=0.3)
fm = r(6, 6)
fm[keep_some((6, 6)).logical_not()] = float("-inf")
sdpa_case({"what": "3-D, float mask with -inf entries"}, r(4, 6, 8), r(4, 6, 8), r(4, 6, 8), attn_mask=fm)


def module_case(meta, module, inputs, call, weights_returned=False):
    """inputs: name -> tensor (floating ones get gradients); call(module, inputs) -> out or (out, weights)."""
    global num_cases
    c = num_cases
    num_cases += 1
    module.train()  # dropout is 0: train mode runs PyTorch's plain path, not the inference fast path
    ins = {}
    for name, t in inputs.items():
        ins[name] = t.clone().requires_grad_() if t is not None and t.is_floating_point() and name in (
            "query", "key", "value", "src", "tgt", "memory", "x") else t
    res = call(module, ins)
    out, weights = res if weights_returned else (res, None)
    g = torch.randn_like(out)
    loss = (out * g).sum()
    if weights is not None:
        gw = torch.randn_like(weights)
        loss = loss + (weights * gw).sum()
        put(c, "weights", weights)
        put(c, "grad_weights", gw)
    loss.backward()
    put(c, "out", out)
    put(c, "grad_out", g)
    for name, t in ins.items():
        if t is None:
            continue
        put(c, "in." + name, t)
        if t.requires_grad:
            put(c, "grad." + name, t.grad)
    for name, p in module.state_dict().items():
        put(c, "param." + name, p)
    for name, p in module.named_parameters():
        put(c, "grad.param." + name, p.grad)
    meta["dtype"] = "F64"
    metadata["case%d" % c] = json.dumps(meta)


def excluded_some(shape, p=0.3):
    """A bool mask in PyTorch's MultiheadAttention convention (true = excluded), one key kept per row."""
    m = torch.rand(shape) < p
    m[..., 0] = False
    return m


nn = torch.nn
E = 8
module_case({"op": "mha", "embed_dim": E, "num_heads": 2, "batch_first": False, "need_weights": True,
             "average_attn_weights": True, "what": "cross-attention, bool key_padding_mask, float attn_mask"},
            nn.MultiheadAttention(E, 2),
            {"query": r(5, 3, E), "key": r(7, 3, E), "value": r(7, 3, E), "key_padding_mask": excluded_some((3, 7)),
             "attn_mask": r(5, 7)},
            lambda m, i: m(i["query"], i["key"], i["value"], key_padding_mask=i["key_padding_mask"],
                           attn_mask=i["attn_mask"], need_weights=True),
            weights_returned=True)
module_case({"op": "mha_self", "embed_dim": E, "num_heads": 4, "batch_first": True, "need_weights": True,
             "average_attn_weights": False, "what": "self-attention, batch_first, causal bool attn_mask, per-head "
             "weights"},
            nn.MultiheadAttention(E, 4, batch_first=True),
            {"x": r(3, 5, E), "attn_mask": torch.ones(5, 5, dtype=torch.bool).triu(1)},
            lambda m, i: m(i["x"], i["x"], i["x"], attn_mask=i["attn_mask"], need_weights=True,
                           average_attn_weights=False),
            weights_returned=True)
module_case({"op": "mha", "embed_dim": E, "num_heads": 2, "batch_first": False, "need_weights": False, "kdim": 5,
             "vdim": 6, "bias": False, "what": "kdim, vdim: separate projection weights; no bias; 3-D bool "
             "attn_mask [N * H, L, S]"},
            nn.MultiheadAttention(E, 2, bias=False, kdim=5, vdim=6),
            {"query": r(4, 2, E), "key": r(6, 2, 5), "value": r(6, 2, 6), "attn_mask": excluded_some((4, 4, 6))},
            lambda m, i: m(i["query"], i["key"], i["value"], attn_mask=i["attn_mask"], need_weights=False)[0])
module_case({"op": "mha", "embed_dim": E, "num_heads": 2, "batch_first": False, "need_weights": True,
             "average_attn_weights": True, "add_bias_kv": True, "add_zero_attn": True,
             "what": "unbatched, bias_k / bias_v, add_zero_attn, bool key_padding_mask [S]"},
            nn.MultiheadAttention(E, 2, add_bias_kv=True, add_zero_attn=True),
            {"query": r(4, E), "key": r(6, E), "value": r(6, E), "key_padding_mask": excluded_some((6,))},
            lambda m, i: m(i["query"], i["key"], i["value"], key_padding_mask=i["key_padding_mask"],
                           need_weights=True),
            weights_returned=True)

layer = dict(dim_feedforward=16, dropout=0.0)
module_case({"op": "encoder_layer", "d_model": E, "nhead": 2, "activation": "relu", "batch_first": False,
             "norm_first": False, "what": "post-norm, ReLU, causal src_mask, bool key padding"},
            nn.TransformerEncoderLayer(E, 2, **layer),
            {"src": r(6, 3, E), "src_mask": nn.Transformer.generate_square_subsequent_mask(6),
             "src_key_padding_mask": excluded_some((3, 6))},
            lambda m, i: m(i["src"], src_mask=i["src_mask"], src_key_padding_mask=i["src_key_padding_mask"]))
module_case({"op": "encoder_layer", "d_model": E, "nhead": 4, "activation": "gelu", "batch_first": True,
             "norm_first": True, "what": "pre-norm, GELU, batch_first, no masks"},
            nn.TransformerEncoderLayer(E, 4, activation="gelu", batch_first=True, norm_first=True, **layer),
            {"src": r(3, 6, E)}, lambda m, i: m(i["src"]))
module_case({"op": "decoder_layer", "d_model": E, "nhead": 2, "activation": "relu", "batch_first": False,
             "norm_first": False, "what": "post-norm, ReLU, causal tgt_mask, memory key padding"},
            nn.TransformerDecoderLayer(E, 2, **layer),
            {"tgt": r(5, 3, E), "memory": r(6, 3, E), "tgt_mask": nn.Transformer.generate_square_subsequent_mask(5),
             "memory_key_padding_mask": excluded_some((3, 6))},
            lambda m, i: m(i["tgt"], i["memory"], tgt_mask=i["tgt_mask"],
                           memory_key_padding_mask=i["memory_key_padding_mask"]))
module_case({"op": "decoder_layer", "d_model": E, "nhead": 2, "activation": "gelu", "batch_first": True,
             "norm_first": True, "what": "pre-norm, GELU, batch_first, tgt key padding, float memory_mask"},
            nn.TransformerDecoderLayer(E, 2, activation="gelu", batch_first=True, norm_first=True, **layer),
            {"tgt": r(3, 5, E), "memory": r(3, 6, E), "memory_mask": r(5, 6),
             "tgt_key_padding_mask": excluded_some((3, 5))},
            lambda m, i: m(i["tgt"], i["memory"], memory_mask=i["memory_mask"],
                           tgt_key_padding_mask=i["tgt_key_padding_mask"]))
module_case({"op": "encoder", "d_model": E, "nhead": 2, "num_layers": 2, "norm": True,
             "what": "2 layers (deep copies) and a final LayerNorm"},
            nn.TransformerEncoder(nn.TransformerEncoderLayer(E, 2, **layer), 2, norm=nn.LayerNorm(E)),
            {"src": r(6, 2, E), "mask": nn.Transformer.generate_square_subsequent_mask(6)},
            lambda m, i: m(i["src"], mask=i["mask"]))
module_case({"op": "transformer", "d_model": E, "nhead": 2, "num_encoder_layers": 2, "num_decoder_layers": 2,
             "what": "the full model, causal tgt_mask, key padding for src, tgt and memory"},
            nn.Transformer(E, 2, 2, 2, **layer),
            {"src": r(6, 3, E), "tgt": r(5, 3, E), "tgt_mask": nn.Transformer.generate_square_subsequent_mask(5),
             "src_key_padding_mask": excluded_some((3, 6)), "tgt_key_padding_mask": excluded_some((3, 5)),
             "memory_key_padding_mask": excluded_some((3, 6))},
            lambda m, i: m(i["src"], i["tgt"], tgt_mask=i["tgt_mask"], src_key_padding_mask=i["src_key_padding_mask"],
                           tgt_key_padding_mask=i["tgt_key_padding_mask"],
                           memory_key_padding_mask=i["memory_key_padding_mask"]))

metadata["num_cases"] = str(num_cases)



write_safetensors(sys.argv[1] if len(sys.argv) > 1 else "tests/refcases/attention.safetensors", tensors, metadata)
print("wrote %d cases, %d tensors" % (num_cases, len(tensors)))
