// The CUDA backend's kernel variants, reachable by name from tests and benchmarks as the
// CPU's are (kernels/cpu/gemm.h, conv.h). No CUDA header: any source may include it. In a
// build without the CUDA backend every call is an ember::Error.
#pragma once

#include <string>
#include <string_view>

namespace ember::kernels::cuda {

// The GEMM under matmul, linear and conv2d's im2col path. EMBER_GEMM sets the starting
// choice: "auto" (cuBLASLt on a GPU; in emulation the hand-written SGEMM's default version
// for float32), "cublaslt", "sgemm" or "sgemm-<version>" (sgemm.cuh's names: v1..v6,
// naive, shared, register, vectorized, double_buffered, warptiled). Other dtypes than
// float32 take cuBLASLt (float64) or a plain kernel (float64 in emulation, integers) under
// every choice. Unknown names, and cuBLASLt in the emulated build, are an ember::Error.
void set_gemm_variant(std::string_view name);
std::string gemm_variant();

// conv2d and its backwards. EMBER_CONV sets the starting choice: "auto" (cuDNN where the
// build has it, im2col otherwise), "cudnn" (an ember::Error where the build has no cuDNN,
// as in emulation) or "im2col" (im2col / col2im around the GEMM above).
void set_conv_variant(std::string_view name);
std::string conv_variant();

// Deterministic mode for cuDNN convolutions (as torch.backends.cudnn.deterministic): only
// algorithms that give the same bits on every run. Off by default. The im2col variant is
// deterministic either way.
void set_conv_deterministic(bool on);
bool conv_deterministic();

// Benchmark mode for cuDNN convolutions (as torch.backends.cudnn.benchmark): the first call
// of each shape times every algorithm on its own tensors and keeps the fastest; off, cuDNN's
// heuristics pick without trial runs. Off by default; EMBER_CUDNN_BENCHMARK=1 turns it on.
void set_conv_benchmark(bool on);
bool conv_benchmark();

// csr_linear's sparse-dense product (core/sparse.h). EMBER_SPMM sets the starting choice:
// "auto" (cuSPARSE on a GPU, the hand-written kernel of csr.cuh in emulation), "cusparse"
// (an ember::Error in the emulated build) or "handwritten". The values' gradient
// (csr_sddmm) is the hand-written kernel under every choice.
void set_spmm_variant(std::string_view name);
std::string spmm_variant();

// The recurrent layers (rnn_layer and its backward, core/rnn_sequence.h). EMBER_RNN sets
// the starting choice: "auto" (cuDNN's RNN API for float32 where the build has cuDNN; the
// hand-written loop for float64 and in builds without it), "cudnn" (every dtype; an
// ember::Error where the build has no cuDNN, as in emulation) or "handwritten" (per step
// the backend's GEMM and rnn.cuh's fused cell kernels). A backward runs under the variant
// its forward ran under: changing it in between is an ember::Error.
void set_rnn_variant(std::string_view name);
std::string rnn_variant();

// The fused attention kernels (scaled_dot_product_attention's flash path), forward and
// backward. EMBER_FLASH sets the starting choice: "auto" (the forward: the split-KV decode
// kernel of attention_decode.cuh for at most 4 query rows against at least 128 keys; the
// tensor-core kernels of attention_tc.cuh / attention_tc_bwd.cuh for bf16 and f16 with
// head dims 64 and 128 on sm_80 and newer; the SIMT kernels of attention.cuh otherwise),
// "simt" (the SIMT kernels always) or "decode" (as auto, with the decode forward for
// every key count when there are at most 4 query rows).
void set_attention_variant(std::string_view name);
std::string attention_variant();
// The kernel the last fused attention forward on this thread ran: "cudnn" (cuDNN's, under
// EMBER_ATTENTION=cudnn where it takes the call), "decode", "tc" or "simt"; "" before any.
// For tests and benchmarks that must know which one ran.
std::string attention_last_forward();

}  // namespace ember::kernels::cuda
