// The tensor-core primitives every kernel uses (sm_80 and newer): mma.sync, ldmatrix and
// cp.async with commit groups, in one place. Under nvcc for a GPU they are inline PTX; in
// the emulator build (host compiler) they are the models in kernels/emu/tensor_core.h,
// which implement the same operations as the PTX ISA defines them, warp-collectively, with
// its per-lane fragment layouts, so CI runs the kernels built on them (gemm_bf16.cuh,
// attention_tc.cuh) against their references. tests/cuda/test_tensor_core.cpp checks each
// form against a scalar per-lane reference, in the emulator and on a GPU.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 / m16n8k8", 16-bit A and
// B, f32 C/D). A lane is 4 g + t (g = lane / 4, t = lane % 4); a 32-bit register holds two
// 16-bit elements, the lower-numbered column (A, C) or row (B) in the low half.
//   m16n8k16: A (16 x 16, row-major) a0 = A[g][2t, 2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
//             a3 = A[g+8][2t+8..]; B (16 x 8, "col") b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g].
//   m16n8k8:  A (16 x 8) a0 = A[g][2t..], a1 = A[g+8][2t..]; B (8 x 8) b0 = B[2t, 2t+1][g].
//   C/D (16 x 8) of both: d0, d1 = D[g][2t, 2t+1], d2, d3 = D[g+8][2t, 2t+1].
//   ldmatrix.m8n8 .x1/.x2/.x4: lanes 8q..8q+7 give the 16-byte-aligned addresses of rows
//             0..7 of matrix q; register q of lane 4 g + t receives row g, elements 2t, 2t+1
//             of matrix q; with .trans elements [2t][g] and [2t+1][g] (the same of the
//             transposed matrix). So ldmatrix.x4 of a 16 x 16 row-major block, matrices
//             ordered (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15,
//             k 8-15), is the A fragment of m16n8k16.
//   cp.async: each thread's copies of 4, 8 or 16 bytes (src_bytes < size zero-fills the rest)
//             are committed as a group; cp_async_wait<N>() returns when at most the N most
//             recent of the thread's groups are still pending. The emulator lands a copy only
//             at the wait that retires it, so a read before that wait sees the old bytes.
//
// Shared-memory addresses are SharedAddr: the 32-bit shared-window address on a GPU, a
// plain address in the emulator (where static __shared__ arrays are thread_local
// variables anywhere in memory); kernels only add byte offsets to them.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/launch.h"

#if !defined(__CUDACC__)
#include "kernels/emu/tensor_core.h"
#endif

namespace ember::kernels::cuda::tc {

template <class T>
inline constexpr bool is_mma_type_v = std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

#if defined(__CUDACC__)

using SharedAddr = uint32_t;

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800

__device__ __forceinline__ SharedAddr shared_address(const void* p) {
  return SharedAddr(__cvta_generic_to_shared(p));
}

// The "memory" clobbers keep the compiler from moving plain shared-memory loads or stores
// across a copy or a wait. .cg (L2 only) exists for 16-byte copies alone; smaller ones are .ca.
template <int kBytes>
__device__ __forceinline__ void cp_async(SharedAddr dst, const void* src, int src_bytes = kBytes) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  if constexpr (kBytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(__cvta_generic_to_global(src)),
                 "r"(src_bytes)
                 : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(__cvta_generic_to_global(src)),
                 "n"(kBytes), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

template <int kCount, bool kTrans>
__device__ __forceinline__ void ldmatrix(uint32_t (&r)[kCount], SharedAddr addr) {
  static_assert(kCount == 1 || kCount == 2 || kCount == 4, "ldmatrix loads 1, 2 or 4 matrices");
  if constexpr (kCount == 1 && kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(addr) : "memory");
  else if constexpr (kCount == 1)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(addr) : "memory");
  else if constexpr (kCount == 2 && kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr)
                 : "memory");
  else if constexpr (kCount == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr)
                 : "memory");
  else if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

// d += a (16 x 16, row) @ b (16 x 8, col), T = bf16 or f16, f32 accumulators.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  static_assert(is_mma_type_v<T>, "mma.sync takes bf16 or f16");
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += a (16 x 8, row) @ b (8 x 8, col).
template <class T>
__device__ __forceinline__ void mma_1688(float (&d)[4], const uint32_t (&a)[2], uint32_t b) {
  static_assert(is_mma_type_v<T>, "mma.sync takes bf16 or f16");
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(b));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(b));
}

#else  // nvcc's host pass, or a GPU below sm_80 (the host launchers refuse those)

__device__ __forceinline__ SharedAddr shared_address(const void*) { return 0; }
template <int kBytes>
__device__ __forceinline__ void cp_async(SharedAddr, const void*, int = kBytes) { __trap(); }
__device__ __forceinline__ void cp_async_commit() {}
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {}
template <int kCount, bool kTrans>
__device__ __forceinline__ void ldmatrix(uint32_t (&)[kCount], SharedAddr) { __trap(); }
template <class T>
__device__ __forceinline__ void mma_16816(float (&)[4], const uint32_t (&)[4], const uint32_t (&)[2]) { __trap(); }
template <class T>
__device__ __forceinline__ void mma_1688(float (&)[4], const uint32_t (&)[2], uint32_t) { __trap(); }

#endif

#else  // the emulator

using SharedAddr = ::ember::emu::tensor_core::SharedAddr;
using ::ember::emu::tensor_core::cp_async;
using ::ember::emu::tensor_core::cp_async_commit;
using ::ember::emu::tensor_core::cp_async_wait;
using ::ember::emu::tensor_core::ldmatrix;
using ::ember::emu::tensor_core::mma_1688;
using ::ember::emu::tensor_core::mma_16816;
using ::ember::emu::tensor_core::shared_address;

#endif

// Two floats as the 32-bit register of a fragment: lo in the low half, rounded to T.
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  static_assert(is_mma_type_v<T>, "fragments hold bf16 or f16");
  uint32_t r;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&r, &v, 4);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&r, &v, 4);
  }
  return r;
}

}  // namespace ember::kernels::cuda::tc
