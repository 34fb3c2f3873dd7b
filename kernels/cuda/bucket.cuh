// Gradient buckets for data-parallel training: flatten copies many gradients, each
// scaled (by 1 / world_size, say), into one contiguous buffer at given offsets, which one
// all-reduce then sums; unflatten copies the buffer's ranges back into the tensors, again
// scaled. Both handle the whole list in one launch (multi_tensor.cuh).
//
// Memory-bound copies: 2 * sizeof(T) bytes per element (one read, one write): 8 B for
// float32, 4 B for bf16 / f16, 16 B for float64. 16-bit values are scaled in float and
// rounded once; float and double ones in their own type, so a scale of 1 (or a power of
// two, barring overflow and underflow) copies bits exactly.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/error.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/multi_tensor.cuh"

namespace ember::kernels::cuda {

// One tensor of a bucket: numel contiguous elements at `tensor`, kept in the flat buffer
// at elements [offset, offset + numel).
template <class T>
struct BucketSlot {
  T* tensor;
  int64_t numel;
  int64_t offset;
};

namespace detail {

template <class T>
constexpr bool kBucketType = std::is_same_v<T, float> || std::is_same_v<T, double> ||
                             std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;
template <class T>
using BucketCompute = std::conditional_t<std::is_same_v<T, double>, double, float>;

// dst = src * scale over one tile (src and dst may be the same range, never partly overlapping).
template <class T>
struct ScaledCopyOp {
  static constexpr int kDepth = 2;  // source, destination
  using Shape = TileShape<16 / sizeof(T)>;
  static constexpr int64_t kTile = Shape::kTile;
  BucketCompute<T> scale;

  __device__ __forceinline__ void operator()(void* const (&ptr)[kDepth], int64_t n, int64_t base) const {
    const T* src = static_cast<const T*>(ptr[0]);
    T* dst = static_cast<T*>(ptr[1]);
    // Note [Aligned body] (multi_tensor.cuh): the first `head` elements one per thread,
    // then whole vectors (a gradient at flat offset k sits at k in the flat buffer too).
    const int head = body_head<Shape::kVec>(src, dst);
    const bool vec = head >= 0;
    const int64_t h = vec ? head : 0;
    if (base == 0 && int64_t(threadIdx.x) < h && int64_t(threadIdx.x) < n)
      dst[threadIdx.x] = round_to<T>(BucketCompute<T>(widen(src[threadIdx.x])) * scale);
    src += h, dst += h, n -= h;
    BucketCompute<T> x[Shape::kElems];
    load_tile<Shape>(src, n, base, vec, x);
    EMBER_UNROLL
    for (int e = 0; e < Shape::kElems; ++e) x[e] *= scale;
    store_tile<Shape>(dst, n, base, vec, x);
  }
};

// The slots fit in the flat buffer and, where `disjoint_in_flat` (flatten writes there),
// do not overlap in it; where not (unflatten writes the tensors), the tensors do not
// overlap one another.
template <class T>
void check_bucket(const char* what, std::span<const BucketSlot<T>> slots, const T* flat, int64_t flat_numel,
                  bool disjoint_in_flat) {
  EMBER_CHECK(flat_numel >= 0, what, ": the flat buffer has ", flat_numel, " elements");
  std::vector<std::pair<uintptr_t, size_t>> ranges;  // (start, index): the written ranges
  for (size_t i = 0; i < slots.size(); ++i) {
    const BucketSlot<T>& s = slots[i];
    EMBER_CHECK(s.numel >= 0 && s.offset >= 0 && s.offset <= flat_numel - s.numel, what, ": slot ", i, " (",
                s.numel, " elements at offset ", s.offset, ") does not fit in the flat buffer of ", flat_numel,
                " elements");
    if (s.numel == 0) continue;
    EMBER_CHECK(s.tensor && flat, what, ": slot ", i, " (", s.numel, " elements) has a null ",
                s.tensor ? "flat buffer" : "tensor");
    ranges.emplace_back(disjoint_in_flat ? uintptr_t(flat + s.offset) : uintptr_t(s.tensor), i);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t k = 1; k < ranges.size(); ++k) {
    const size_t a = ranges[k - 1].second, b = ranges[k].second;
    EMBER_CHECK(ranges[k - 1].first + slots[a].numel * sizeof(T) <= ranges[k].first, what, ": slots ", a, " and ",
                b, disjoint_in_flat ? " overlap in the flat buffer" : " have overlapping tensors");
  }
}

}  // namespace detail

// flat[offset_i + j] = tensor_i[j] * scale for every slot i, in ceil(slots / 119)
// launches. Elements of flat outside the slots are left as they are.
template <class T>
void bucket_flatten(std::type_identity_t<std::span<const BucketSlot<T>>> slots, T* flat, int64_t flat_numel,
                    double scale, cudaStream_t stream) {
  static_assert(detail::kBucketType<T>, "bucket_flatten: float, double, __nv_bfloat16 or __half");
  detail::check_bucket("bucket_flatten", slots, flat, flat_numel, /*disjoint_in_flat=*/true);
  multi_tensor_apply(
      slots.size(),
      [&](size_t i) {
        const BucketSlot<T>& s = slots[i];
        if (s.numel == 0) return TensorPtrs<2>{{nullptr, nullptr}, 0};  // skipped; flat may be null
        return TensorPtrs<2>{{s.tensor, flat + s.offset}, s.numel};
      },
      detail::ScaledCopyOp<T>{detail::BucketCompute<T>(scale)}, stream);
}

// tensor_i[j] = flat[offset_i + j] * scale for every slot i, in ceil(slots / 119) launches.
template <class T>
void bucket_unflatten(const T* flat, int64_t flat_numel, std::type_identity_t<std::span<const BucketSlot<T>>> slots,
                      double scale, cudaStream_t stream) {
  static_assert(detail::kBucketType<T>, "bucket_unflatten: float, double, __nv_bfloat16 or __half");
  detail::check_bucket("bucket_unflatten", slots, flat, flat_numel, /*disjoint_in_flat=*/false);
  multi_tensor_apply(
      slots.size(),
      [&](size_t i) {
        const BucketSlot<T>& s = slots[i];
        if (s.numel == 0) return TensorPtrs<2>{{nullptr, nullptr}, 0};  // skipped; flat may be null
        return TensorPtrs<2>{{const_cast<T*>(flat + s.offset), s.tensor}, s.numel};
      },
      detail::ScaledCopyOp<T>{detail::BucketCompute<T>(scale)}, stream);
}

static_assert(TensorListMeta<2>::kMaxTensors == 119, "update the slots-per-launch figures above");

}  // namespace ember::kernels::cuda
