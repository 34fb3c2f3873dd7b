// The CPU's CSR kernels: csr_linear (out = x @ A^T + bias) and csr_sddmm (the values'
// gradient), float32 and float64.
//
// Note [CPU CSR layout]. Both kernels walk A's rows and need, for each entry (r, c), the
// column c of x across the batch. So the batch is cut into blocks and each block of x (and
// of dy) is first transposed into a [K, width] panel, zero-padded: one entry of A then
// costs one fixed-width axpy (or dot) over contiguous memory, which the compiler
// vectorizes, instead of scattered loads. csr_linear's width is 16, one vector register
// of float accumulators, with a panel of 49 KiB for K = 784, about L1's size (64 measured 3.7x
// slower: its 256-byte panel rows came from L2, one per multiply-add); csr_sddmm's is 128,
// so each dot's horizontal sum is paid once per 128 products. Threads split A's rows; each
// owns its outputs, so there are no atomics and the sums' order never depends on timing.
// bench/bench_sparse.cpp compares this with Eigen's sparse-dense product (docs/sparse.md).
#include <algorithm>
#include <cstdint>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/scratch.h"

namespace ember::kernels::cpu {
namespace {

constexpr int64_t kDotBlock = 128;  // batch rows per csr_sddmm panel
constexpr int64_t kBlock = 16;      // batch rows per csr_linear panel (Note [CPU CSR layout])

// panel [cols, width] = src [m0 : m0 + mb, cols]^T, zero past mb.
template <class T>
void transpose_panel(const T* src, int64_t cols, int64_t m0, int64_t mb, int64_t width, T* panel) {
  parallel_for(0, cols, std::max<int64_t>(1, kGrainSize / width), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      T* p = panel + c * width;
      for (int64_t i = 0; i < mb; ++i) p[i] = src[(m0 + i) * cols + c];
      for (int64_t i = mb; i < width; ++i) p[i] = T(0);
    }
  });
}

// Rows of A per task: about kGrainSize multiply-adds each.
int64_t row_grain(int64_t rows, int64_t nnz, int64_t width) {
  const int64_t per_row = std::max<int64_t>(1, nnz / std::max<int64_t>(rows, 1)) * width;
  return std::max<int64_t>(1, kGrainSize / per_row);
}

template <class T>
void csr_linear_typed(const Tensor& out, const Tensor& x, const Tensor& row_ptr, const Tensor& col_idx,
                      const Tensor& values, const Tensor& bias) {
  const int64_t M = x.size(0), K = x.size(1), N = out.size(1);
  const int32_t* rp = row_ptr.data<const int32_t>();
  const int32_t* ci = col_idx.data<const int32_t>();
  const T* v = values.data<const T>();
  const T* b = bias.defined() ? bias.data<const T>() : nullptr;
  const T* xp = x.data<const T>();
  T* op = out.data<T>();
  Scratch<T> panel(static_cast<size_t>(std::max<int64_t>(K, 1) * kBlock));
  const int64_t grain = row_grain(N, col_idx.numel(), kBlock);
  for (int64_t m0 = 0; m0 < M; m0 += kBlock) {
    const int64_t mb = std::min(kBlock, M - m0);
    transpose_panel(xp, K, m0, mb, kBlock, panel.data());
    parallel_for(0, N, grain, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        T acc[kBlock];
        const T init = b ? b[n] : T(0);
        for (int64_t i = 0; i < kBlock; ++i) acc[i] = init;
        for (int32_t j = rp[n]; j < rp[n + 1]; ++j) {
          const T w = v[j];
          const T* col = panel.data() + int64_t(ci[j]) * kBlock;
          for (int64_t i = 0; i < kBlock; ++i) acc[i] += w * col[i];
        }
        for (int64_t i = 0; i < mb; ++i) op[(m0 + i) * N + n] = acc[i];
      }
    });
  }
}

template <class T>
void csr_sddmm_typed(const Tensor& dvalues, const Tensor& dy, const Tensor& x, const Tensor& row_ptr,
                     const Tensor& col_idx) {
  const int64_t M = x.size(0), K = x.size(1), N = dy.size(1), nnz = col_idx.numel();
  const int32_t* rp = row_ptr.data<const int32_t>();
  const int32_t* ci = col_idx.data<const int32_t>();
  T* dv = dvalues.data<T>();
  std::fill(dv, dv + nnz, T(0));
  Scratch<T> xpanel(static_cast<size_t>(std::max<int64_t>(K, 1) * kDotBlock));
  Scratch<T> gpanel(static_cast<size_t>(std::max<int64_t>(N, 1) * kDotBlock));
  const int64_t grain = row_grain(N, nnz, kDotBlock);
  for (int64_t m0 = 0; m0 < M; m0 += kDotBlock) {
    const int64_t mb = std::min(kDotBlock, M - m0);
    transpose_panel(x.data<const T>(), K, m0, mb, kDotBlock, xpanel.data());
    transpose_panel(dy.data<const T>(), N, m0, mb, kDotBlock, gpanel.data());
    parallel_for(0, N, grain, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        const T* g = gpanel.data() + n * kDotBlock;
        for (int32_t j = rp[n]; j < rp[n + 1]; ++j) {
          const T* col = xpanel.data() + int64_t(ci[j]) * kDotBlock;
          T part[16] = {};  // lanes of partial sums: a vectorizable dot without reassociation flags
          for (int64_t i = 0; i < kDotBlock; i += 16)
            for (int k = 0; k < 16; ++k) part[k] += g[i + k] * col[i + k];
          T acc = T(0);
          for (int k = 0; k < 16; ++k) acc += part[k];
          dv[j] += acc;
        }
      }
    });
  }
}

void csr_linear_kernel(const Tensor& out, const Tensor& x, const Tensor& row_ptr, const Tensor& col_idx,
                       const Tensor& values, const Tensor& bias) {
  if (out.dtype() == kFloat64) return csr_linear_typed<double>(out, x, row_ptr, col_idx, values, bias);
  EMBER_CHECK(out.dtype() == kFloat32, "csr_linear (cpu): dtype ", dtype_name(out.dtype()), " is not supported");
  csr_linear_typed<float>(out, x, row_ptr, col_idx, values, bias);
}

void csr_sddmm_kernel(const Tensor& dvalues, const Tensor& dy, const Tensor& x, const Tensor& row_ptr,
                      const Tensor& col_idx) {
  if (dvalues.dtype() == kFloat64) return csr_sddmm_typed<double>(dvalues, dy, x, row_ptr, col_idx);
  EMBER_CHECK(dvalues.dtype() == kFloat32, "csr_sddmm (cpu): dtype ", dtype_name(dvalues.dtype()),
              " is not supported");
  csr_sddmm_typed<float>(dvalues, dy, x, row_ptr, col_idx);
}

}  // namespace

void register_sparse() {
  csr_linear_stub.set(DeviceType::CPU, csr_linear_kernel);
  csr_sddmm_stub.set(DeviceType::CPU, csr_sddmm_kernel);
}

}  // namespace ember::kernels::cpu
