// Multi-tensor apply: one kernel launch runs an elementwise operation over a LIST of
// tensors (every parameter of a model, every gradient of a bucket), instead of one launch
// per tensor. The fused optimizers (optim.cuh) and the gradient buckets (bucket.cuh) are
// built on it. Policy: Note [Multi-tensor metadata].
//
// An operation is a small struct (the "op") passed by value to the kernel:
//   static constexpr int kDepth;     // pointers per tensor (param, grad, exp_avg, ...)
//   static constexpr int64_t kTile;  // elements one block handles per turn (TileShape)
//   __device__ void operator()(void* const (&ptr)[kDepth], int64_t n, int64_t base) const;
// It updates elements [base, base + kTile) of a tensor of n elements, with the pointers
// of that tensor; the kernel decides which tensor and tile each block takes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "base/error.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/types.cuh"

// Fully unrolls the next loop (so per-thread arrays stay in registers); g++ spells it
// differently and warns about nvcc's spelling.

namespace ember::kernels::cuda {

// Note [Multi-tensor metadata]
// Like PyTorch's multi_tensor_apply, the list travels as a by-value kernel parameter
// (TensorListMeta), so a launch needs no device allocation and no copy before it. Kernel
// parameters are limited to 4 KiB (32 KiB only from CUDA 12.1 on), so a struct holds at
// most kMaxTensors tensors; the host splits a longer list into several launches, and
// only then. The kernel indexes the struct where it lies (ld.param with a register
// offset: no local copy, 0 bytes of stack per ptxas).
//
// Where PyTorch lists one (tensor, chunk) pair per block, which also caps the elements
// per launch (320 blocks of 64 Ki elements) and leaves the last wave of blocks uneven,
// the block -> (tensor, tile) map here is the running count of tiles before each tensor
// (first_tile). The tiles of all the tensors form one sequence; block b takes tiles b,
// b + gridDim.x, b + 2 gridDim.x, ... and walks first_tile forward to find each one's
// tensor (at most kMaxTensors steps per block in all). So one launch covers any number of
// elements, the grid is sized to what the GPU holds at once (no tail wave), and tiles
// are small (2 vectors per thread), so blocks finish together whatever the sizes.

// The bytes of kernel parameters a launch may use for the tensor list; the rest of the
// 4 KiB is left to the op (update constants).
inline constexpr size_t kTensorListBytes = 3840;

template <int Depth>
struct TensorListMeta {
  static constexpr int kMaxTensors = int((kTensorListBytes - 16) / (Depth * sizeof(void*) + 2 * sizeof(int64_t)));
  void* ptr[Depth][kMaxTensors];          // ptr[d][i]: the d-th pointer of tensor i
  int64_t numel[kMaxTensors];             // elements of tensor i (> 0)
  int64_t first_tile[kMaxTensors + 1];    // tiles before tensor i; first_tile[count] = all tiles
  int count;                              // tensors in this launch
};

// One tensor of the list as the host describes it: its kDepth pointers and its size.
template <int Depth>
struct TensorPtrs {
  void* ptr[Depth];
  int64_t numel;
};

// How a thread's share of a tile is laid out: kUnroll vectors of kVec elements (two
// vectors' loads in flight per stream per thread before any arithmetic).
template <int Vec, int Unroll = 2>
struct TileShape {
  static constexpr int kVec = Vec, kUnroll = Unroll, kElems = Vec * Unroll;
  static constexpr int64_t kTile = int64_t(kBlockThreads) * kElems;

  // Offset from the tile's base of this thread's element e (0 <= e < kElems). Vector
  // layout: thread t owns vectors t and t + kBlockThreads. Scalar layout (a pointer is not
  // aligned): element e of thread t is t + e * kBlockThreads, so each load is coalesced.
  __device__ __forceinline__ static int64_t offset(int e, bool vec) {
    return vec ? (int64_t(threadIdx.x) + int64_t(e / kVec) * kBlockThreads) * kVec + e % kVec
               : int64_t(threadIdx.x) + int64_t(e) * kBlockThreads;
  }
};

// Note [Aligned body]. A tensor of a list may start anywhere (a view one element into a
// flat buffer; the benchmark's 200 tensors of sizes not divisible by 4 packed one after
// another), so vec_aligned(p) alone sent 6 of every 7 of them down the scalar path on the
// H200 of 2026-12-04 (AdamW at 65% of a copy). Where every pointer of a tensor reaches a
// kVec-element boundary after the same number of elements `head` (< kVec), the op
// updates those first `head` elements one by one (the tensor's first tile) and the rest,
// from p + head, as whole vectors. body_head() finds head: -1 where the pointers
// disagree (then everything is scalar, as before). Null pointers (SGD's missing momentum
// buffer) are skipped.
template <int kVec, class... T>
__device__ __forceinline__ int body_head(const T*... p) {
  int head = -2;  // -2: no pointer seen yet
  bool same = true;
  const auto see = [&](auto* q) {
    if (q == nullptr) return;
    using E = std::remove_cv_t<std::remove_pointer_t<decltype(q)>>;
    const int h = int((kVec - (reinterpret_cast<uintptr_t>(q) / sizeof(E)) % kVec) % kVec);
    if (reinterpret_cast<uintptr_t>(q) % sizeof(E) != 0 || (head != -2 && h != head)) same = false;
    head = h;
  };
  (see(p), ...);
  return same && head >= 0 ? head : -1;
}

// This thread's elements of the tile at `base` of x (n elements), converted to C;
// elements past n read as 0.
template <class Shape, class C, class T>
__device__ __forceinline__ void load_tile(const T* __restrict__ x, int64_t n, int64_t base, bool vec,
                                          C (&out)[Shape::kElems]) {
  EMBER_UNROLL
  for (int u = 0; u < Shape::kUnroll; ++u) {
    const int64_t i = base + Shape::offset(u * Shape::kVec, vec);
    if (vec && i + Shape::kVec <= n) {
      const auto pk = load_vec<Pack<T, Shape::kVec>>(x + i);
      EMBER_UNROLL
      for (int k = 0; k < Shape::kVec; ++k) out[u * Shape::kVec + k] = C(widen(pk.v[k]));
    } else {
      EMBER_UNROLL
      for (int k = 0; k < Shape::kVec; ++k) {
        const int64_t j = base + Shape::offset(u * Shape::kVec + k, vec);
        out[u * Shape::kVec + k] = j < n ? C(widen(x[j])) : C(0);
      }
    }
  }
}

// Stores this thread's elements of the tile at `base` of y (n elements) as T.
template <class Shape, class T, class C>
__device__ __forceinline__ void store_tile(T* __restrict__ y, int64_t n, int64_t base, bool vec,
                                           const C (&in)[Shape::kElems]) {
  EMBER_UNROLL
  for (int u = 0; u < Shape::kUnroll; ++u) {
    const int64_t i = base + Shape::offset(u * Shape::kVec, vec);
    if (vec && i + Shape::kVec <= n) {
      Pack<T, Shape::kVec> pk;
      EMBER_UNROLL
      for (int k = 0; k < Shape::kVec; ++k) pk.v[k] = round_to<T>(in[u * Shape::kVec + k]);
      store_vec_global(y + i, pk);  // one st.global.v4 (types.cuh)
    } else {
      EMBER_UNROLL
      for (int k = 0; k < Shape::kVec; ++k) {
        const int64_t j = base + Shape::offset(u * Shape::kVec + k, vec);
        if (j < n) y[j] = round_to<T>(in[u * Shape::kVec + k]);
      }
    }
  }
}

// Runs op over every tile of every tensor in meta (Note [Multi-tensor metadata]). The
// op's comment says what bounds it and the bytes it moves per element. At most 64
// registers, so 4 blocks of 256 fit an SM: with Note [Aligned body]'s head the AdamW float32
// instance took 71 uncapped (3 blocks); capped, 55, no stack (ptxas, sm_90, nvcc 13.0;
// SGD 61, AdamW float64 64, bucket flatten 40).
template <class Op>
__global__ void __launch_bounds__(kBlockThreads, 4) multi_tensor_kernel(TensorListMeta<Op::kDepth> meta, Op op) {
  const int64_t tiles = meta.first_tile[meta.count];
  int t = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    while (tile >= meta.first_tile[t + 1]) ++t;  // tensors are in tile order: walk forward
    void* ptr[Op::kDepth];
    EMBER_UNROLL
    for (int d = 0; d < Op::kDepth; ++d) ptr[d] = meta.ptr[d][t];
    op(ptr, meta.numel[t], (tile - meta.first_tile[t]) * Op::kTile);
  }
}

// Blocks of the multi-tensor kernel for `tiles` tiles: no more than the GPU holds at
// once (its occupancy for this op), so every block runs in the first and only wave.
// (ptxas, sm_90: AdamW float32 takes 55 registers, so 4 blocks of 256 threads per SM,
// each thread with 8 16-byte loads in flight: 128 KiB per SM, several times what
// Little's law asks for 4.8 TB/s over 132 SMs at about a microsecond of latency.)
template <class Op>
LaunchConfig multi_tensor_config(int64_t tiles) {
#if defined(__CUDACC__)
  // Per op, once: occupancy depends on the kernel's registers, not on the sizes.
  static const int per_sm = [] {
    int n = 0;
    EMBER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, multi_tensor_kernel<Op>, kBlockThreads, 0));
    return n > 0 ? n : 1;
  }();
#else
  const int per_sm = 8;  // 2048 threads per SM, as the GPU would hold at 32 registers a thread
#endif
  return LaunchConfig{dim3(grid_stride_blocks(tiles, 1, per_sm)), dim3(kBlockThreads), 0};
}

// Applies op to `count` tensors, tensor(i) -> TensorPtrs<Op::kDepth>, in as few launches
// as the metadata allows (ceil(non-empty tensors / kMaxTensors)). Empty tensors are
// skipped; an empty list launches nothing. The caller has checked the pointers.
template <class Op, class GetTensor>
void multi_tensor_apply(size_t count, GetTensor&& tensor, const Op& op, cudaStream_t stream) {
  using Meta = TensorListMeta<Op::kDepth>;
  static_assert(sizeof(Meta) + sizeof(Op) <= 4096, "kernel parameters must fit in 4 KiB");
  Meta meta{};
  int64_t tiles = 0;
  const auto flush = [&] {
    if (meta.count == 0) return;
    meta.first_tile[meta.count] = tiles;
    launch<multi_tensor_kernel<Op>>(multi_tensor_config<Op>(tiles), stream, meta, op);
    meta.count = 0;
    tiles = 0;
  };
  for (size_t i = 0; i < count; ++i) {
    const TensorPtrs<Op::kDepth> t = tensor(i);
    if (t.numel == 0) continue;
    const int k = meta.count++;
    for (int d = 0; d < Op::kDepth; ++d) meta.ptr[d][k] = t.ptr[d];
    meta.numel[k] = t.numel;
    meta.first_tile[k] = tiles;
    tiles += (t.numel + Op::kTile - 1) / Op::kTile;
    if (meta.count == Meta::kMaxTensors) flush();
  }
  flush();
}

}  // namespace ember::kernels::cuda
