// CPU batched matmul: out [B, M, N] = a [B, M, K] @ b [B, K, N]. 2*M*N*K flops per batch.
// Operands whose strides describe a (possibly transposed) row-major matrix go to GEMM
// as they are; other layouts are copied to a contiguous buffer first. Many small
// products run one per thread; large ones use the threaded GEMM one after another.
#include <vector>

#include "kernels/common/unary_ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {
namespace {

struct MatrixLayout {
  bool trans;
  int64_t ld;
  bool ok;
};

// How a rows x cols matrix with element strides (rs, cs) reads as a BLAS operand.
MatrixLayout layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if (cs == 1 && (rows == 1 || rs >= cols)) return {false, rows == 1 ? std::max<int64_t>(cols, 1) : rs, true};
  if (rs == 1 && (cols == 1 || cs >= rows)) return {true, cols == 1 ? std::max<int64_t>(rows, 1) : cs, true};
  return {false, 0, false};
}

template <class T>
void matmul_float(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t B = out.shape()[0], M = out.shape()[1], N = out.shape()[2], K = a.shape()[2];
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  T* pc = static_cast<T*>(out.data_ptr());
  const MatrixLayout la = layout(M, K, a.strides()[1], a.strides()[2]);
  const MatrixLayout lb = layout(K, N, b.strides()[1], b.strides()[2]);

  auto one = [&](int64_t i, bool parallel) {
    const T* ai = pa + i * a.strides()[0];
    const T* bi = pb + i * b.strides()[0];
    std::vector<T> abuf, bbuf;
    MatrixLayout ua = la, ub = lb;
    auto pack = [](const T* src, int64_t rows, int64_t cols, int64_t rs, int64_t cs, std::vector<T>& buf) {
      buf.resize(rows * cols);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) buf[r * cols + c] = src[r * rs + c * cs];
      return buf.data();
    };
    if (!ua.ok) {
      ai = pack(ai, M, K, a.strides()[1], a.strides()[2], abuf);
      ua = {false, K, true};
    }
    if (!ub.ok) {
      bi = pack(bi, K, N, b.strides()[1], b.strides()[2], bbuf);
      ub = {false, N, true};
    }
    gemm<T>(ua.trans, ub.trans, M, N, K, ai, ua.ld, bi, ub.ld, pc + i * M * N, N, false, parallel);
  };

  const double flops_each = double(M) * double(N) * double(K);
  if (B > 1 && flops_each < 128.0 * 128 * 128) {
    parallel_for(0, B, std::max<int64_t>(1, int64_t(65536.0 / std::max(flops_each, 1.0))), [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) one(i, false);
    });
  } else {
    for (int64_t i = 0; i < B; ++i) one(i, true);
  }
}

// Integer matmul: a plain loop (rare in practice; exact in the accumulator type).
template <class T>
void matmul_integer(const Tensor& out, const Tensor& a, const Tensor& b) {
  const int64_t B = out.shape()[0], M = out.shape()[1], N = out.shape()[2], K = a.shape()[2];
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  T* pc = static_cast<T*>(out.data_ptr());
  const auto& sa = a.strides();
  const auto& sb = b.strides();
  parallel_for(0, B * M, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(N * K, 1)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t i = r / M, m = r % M;
      for (int64_t n = 0; n < N; ++n) {
        T acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += pa[i * sa[0] + m * sa[1] + k * sa[2]] * pb[i * sb[0] + k * sb[1] + n * sb[2]];
        pc[r * N + n] = acc;
      }
    }
  });
}

void matmul_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  switch (a.dtype()) {
    case DType::Float32: return matmul_float<float>(out, a, b);
    case DType::Float64: return matmul_float<double>(out, a, b);
    case DType::UInt8: return matmul_integer<uint8_t>(out, a, b);
    case DType::Int32: return matmul_integer<int32_t>(out, a, b);
    case DType::Int64: return matmul_integer<int64_t>(out, a, b);
    default: EMBER_FAIL("matmul kernel: dtype ", dtype_name(a.dtype()), " is not supported on the cpu");
  }
}

// out [M, N] = relu?(x [M, K] @ w [N, K]^T + bias): the rows start as the bias and the
// GEMM adds into them (no separate bias pass); the ReLU then runs over row blocks that
// are still in cache.
template <class T>
void linear_float(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, bool relu) {
  const int64_t M = out.shape()[0], N = out.shape()[1], K = x.shape()[1];
  T* y = static_cast<T*>(out.data_ptr());
  const T* b = bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr;
  if (b)
    parallel_for(0, M, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(N, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) std::copy(b, b + N, y + r * N);
    });
  gemm<T>(false, true, M, N, K, static_cast<const T*>(x.data_ptr()), K, static_cast<const T*>(w.data_ptr()), K, y, N,
          b != nullptr, true);
  if (relu)
    parallel_for(0, M * N, kGrainSize, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) y[i] = ops::Relu{}(y[i]);
    });
}

void linear_kernel(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, bool relu) {
  if (x.dtype() == DType::Float32) return linear_float<float>(out, x, w, bias, relu);
  if (x.dtype() == DType::Float64) return linear_float<double>(out, x, w, bias, relu);
  EMBER_FAIL("linear kernel: dtype ", dtype_name(x.dtype()), " is not supported on the cpu");
}

}  // namespace

void register_matmul() {
  matmul_stub.set(DeviceType::CPU, matmul_kernel);
  linear_stub.set(DeviceType::CPU, linear_kernel);
}

}  // namespace ember::kernels::cpu
