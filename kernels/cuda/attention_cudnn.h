// Fused attention forward through cuDNN's graph (backend) API (GPU builds with cuDNN only,
// EMBER_WITH_CUDNN): one CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR (cuDNN 9.13 and
// newer), its execution plan chosen once per shape from cuDNN's heuristics and cached,
// the shapes cuDNN has no engine for remembered too. What the installed cuDNN (9.19) can
// express in that one operation is the plain attention: bf16 and f16, no mask, not
// causal, no dropout (the operation's score-modifier subgraph, which carries masks, and
// a backward operation that finalizes come with cuDNN 9.21); everything else is the
// caller's to run on the hand-written kernels. The tensors are the op table's
// (core/dispatch.h, folded by core): q [BH, L, E], k [BH, S, E], v [BH, S, E], out
// [BH, L, E], lse [BH, L] float32 (cuDNN's softmax statistics: the natural-log
// log-sum-exp of each row's scaled scores, what the hand-written backward takes).
#pragma once

#include <cstdint>

#include "core/dispatch.h"

namespace ember::kernels::cuda {

// Whether cuDNN's fused attention may take this call by its options and dtypes alone
// (the engine's own verdict comes at the first call of each shape).
bool cudnn_attention_applies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             const AttentionParams& p);

// Runs the forward through cuDNN and returns true, or returns false (and computes nothing)
// when cuDNN has no engine for the shape; that verdict is cached with the shape.
bool cudnn_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                             double scale);

}  // namespace ember::kernels::cuda
