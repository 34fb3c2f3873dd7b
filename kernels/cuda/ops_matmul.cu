// The CUDA slots of matmul and linear through the backend's GEMM (blas.h: cuBLASLt on a
// GPU, the hand-written SGEMM by name and in emulation). Operands whose strides describe
// a (possibly transposed) row-major matrix go to the GEMM as they are, batch stride 0
// included; other layouts are copied to a contiguous scratch buffer first.
#include <algorithm>
#include <memory>

#include "kernels/cuda/blas.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/layout.cuh"
#include "kernels/cuda/scratch.h"

#include "kernels/cuda/cuda_kernels.h"

namespace ember::kernels::cuda {
namespace {

struct MatrixLayout {
  bool trans;
  int64_t ld;
  bool ok;
};

// How a rows x cols matrix with element strides (rs, cs) reads as a GEMM operand (the
// CPU's rule, kernels/cpu/matmul.cpp).
MatrixLayout matrix_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if (cs == 1 && (rows == 1 || rs >= cols)) return {false, rows == 1 ? std::max<int64_t>(cols, 1) : rs, true};
  if (rs == 1 && (cols == 1 || cs >= rows)) return {true, cols == 1 ? std::max<int64_t>(rows, 1) : cs, true};
  return {false, 0, false};
}

// One operand [B, rows, cols] as the GEMM reads it; a copy in `packed` when its strides
// do not allow that directly.
template <class T>
struct Operand {
  const T* ptr;
  MatrixLayout layout;
  int64_t batch_stride;
  std::unique_ptr<DeviceScratch> packed;

  Operand(const Tensor& t, const OpScope& scope) {
    const int64_t B = t.shape()[0], rows = t.shape()[1], cols = t.shape()[2];
    ptr = static_cast<const T*>(t.data_ptr());
    layout = matrix_layout(rows, cols, t.strides()[1], t.strides()[2]);
    batch_stride = B == 1 ? 0 : t.strides()[0];
    if (layout.ok) return;
    packed = std::make_unique<DeviceScratch>(t.device().index, scope.stream(), t.numel() * sizeof(T));
    permute_contiguous<T>(ptr, packed->get<T>(), layout_of(t), scope.stream());
    ptr = packed->get<T>();
    layout = {false, std::max<int64_t>(cols, 1), true};
    batch_stride = B == 1 ? 0 : rows * cols;
  }
};

template <class T>
void matmul_typed(const Tensor& out, const Tensor& a, const Tensor& b) {
  const OpScope scope(out);
  const Operand<T> oa(a, scope), ob(b, scope);
  GemmProblem<T, T> p;
  p.batch = out.shape()[0], p.m = out.shape()[1], p.n = out.shape()[2], p.k = a.shape()[2];
  p.a = oa.ptr, p.lda = oa.layout.ld, p.trans_a = oa.layout.trans, p.stride_a = oa.batch_stride;
  p.b = ob.ptr, p.ldb = ob.layout.ld, p.trans_b = ob.layout.trans, p.stride_b = ob.batch_stride;
  p.c = static_cast<T*>(out.data_ptr()), p.ldc = std::max<int64_t>(p.n, 1), p.stride_c = p.m * p.n;
  gemm<T>(p, nullptr, false, out.device().index, scope.stream());
}

void matmul_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (out.numel() == 0) return;
  switch (a.dtype()) {
    case DType::Float32: return matmul_typed<float>(out, a, b);
    case DType::Float64: return matmul_typed<double>(out, a, b);
    case DType::UInt8: return matmul_typed<uint8_t>(out, a, b);
    case DType::Int32: return matmul_typed<int32_t>(out, a, b);
    case DType::Int64: return matmul_typed<int64_t>(out, a, b);
    default: EMBER_FAIL("matmul kernel: dtype ", dtype_name(a.dtype()), " is not supported on cuda");
  }
}

// out [M, N] = relu?(x [M, K] @ w [N, K]^T + bias): one GEMM with its epilogue.
template <class T>
void linear_typed(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, bool relu) {
  const OpScope scope(out);
  GemmProblem<T, T> p;
  p.m = out.shape()[0], p.n = out.shape()[1], p.k = x.shape()[1];
  p.a = static_cast<const T*>(x.data_ptr()), p.lda = std::max<int64_t>(p.k, 1);
  p.b = static_cast<const T*>(w.data_ptr()), p.ldb = std::max<int64_t>(p.k, 1), p.trans_b = true;
  p.c = static_cast<T*>(out.data_ptr()), p.ldc = std::max<int64_t>(p.n, 1);
  gemm<T>(p, bias.defined() ? static_cast<const T*>(bias.data_ptr()) : nullptr, relu, out.device().index,
          scope.stream());
}

void linear_kernel(const Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias, bool relu) {
  if (out.numel() == 0) return;
  if (x.dtype() == DType::Float32) return linear_typed<float>(out, x, w, bias, relu);
  if (x.dtype() == DType::Float64) return linear_typed<double>(out, x, w, bias, relu);
  EMBER_FAIL("linear kernel: dtype ", dtype_name(x.dtype()), " is not supported on cuda");
}

}  // namespace

void register_matmul() {
  matmul_stub.set(DeviceType::CUDA, matmul_kernel);
  linear_stub.set(DeviceType::CUDA, linear_kernel);
}

}  // namespace ember::kernels::cuda
