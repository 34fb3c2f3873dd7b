// The CUDA slots of the elementwise ops: unary and binary math (the kernels/common
// functors, through elementwise.cuh's map kernels), clamp, where, arange and linspace.
// The dtypes each op takes are the CPU backend's (kernels/cpu/elementwise.cpp), so no
// kernel is instantiated for a dtype core never sends: float math on the four floating
// types (16-bit ones computed in float), sign and max ops on the integers too, comparisons
// on every dtype with a bool output. Every kernel runs on the current stream of the
// output's device; inputs may be strided or broadcast (stride 0).
#if defined(__CUDACC__)
// abs and relu of uint8 compare an unsigned value with 0, as the CPU's loops do: correct,
// and nvcc's warning 186 ("pointless comparison") says nothing more.
#pragma nv_diag_suppress 186
#endif

#include "kernels/cuda/device.h"
#include "kernels/cuda/elementwise.cuh"

#include <limits>

#include "kernels/cuda/cuda_kernels.h"

namespace ember::kernels::cuda {
namespace {

template <class T>
inline constexpr bool is_float_v = std::is_floating_point_v<T> || is_16bit_float_v<T>;

template <class Op>
inline constexpr bool kIntegerUnary =
    std::is_same_v<Op, ops::Neg> || std::is_same_v<Op, ops::Abs> || std::is_same_v<Op, ops::Relu>;

template <class Op>
inline constexpr bool kComparison = std::is_same_v<Op, ops::Eq> || std::is_same_v<Op, ops::Ne> ||
                                    std::is_same_v<Op, ops::Lt> || std::is_same_v<Op, ops::Le> ||
                                    std::is_same_v<Op, ops::Gt> || std::is_same_v<Op, ops::Ge>;

template <class T>
const T* data(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <class T>
T* mutable_data(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

template <class Op>
void unary_kernel(const Tensor& out, const Tensor& in) {
  const OpScope scope(out);
  visit_cuda_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T> || (kIntegerUnary<Op> && !std::is_same_v<T, bool>)) {
      unary<Op, T>(data<T>(in), layout_of(in), mutable_data<T>(out), layout_of(out), Op{}, scope.stream());
    } else {
      EMBER_FAIL("unary kernel (cuda): dtype ", dtype_name(in.dtype()), " is not supported");
    }
  });
}

// b on the host is a scalar (Note [Scalar operands]): its value goes to the kernel.
template <class Op>
void binary_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  const OpScope scope(out);
  const bool scalar = b.device().is_cpu();
  visit_cuda_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using R = std::conditional_t<kComparison<Op>, bool, T>;
    if constexpr (kComparison<Op> || !std::is_same_v<T, bool>) {
      if (scalar)
        binary_scalar<Op, R, T>(data<T>(a), layout_of(a), *static_cast<const T*>(b.data_ptr()), mutable_data<R>(out),
                                layout_of(out), Op{}, scope.stream());
      else
        binary<Op, R, T>(data<T>(a), layout_of(a), data<T>(b), layout_of(b), mutable_data<R>(out), layout_of(out),
                         Op{}, scope.stream());
    } else {
      EMBER_FAIL("binary kernel (cuda): dtype bool is not supported");
    }
  });
}

void clamp_kernel(const Tensor& out, const Tensor& in, double lo, double hi) {
  const OpScope scope(out);
  visit_cuda_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    if constexpr (!std::is_same_v<T, bool>) {
      // Integer bounds saturate to the type's range (core passes +-inf for "no bound").
      auto bound = [](double v) {
        if constexpr (std::is_integral_v<C>) {
          constexpr double kLo = double(std::numeric_limits<C>::lowest()), kHi = double(std::numeric_limits<C>::max());
          return static_cast<C>(v < kLo ? kLo : (v > kHi ? kHi : v));
        } else {
          return static_cast<C>(v);
        }
      };
      unary<ops::Clamp<C>, T>(data<T>(in), layout_of(in), mutable_data<T>(out), layout_of(out),
                              ops::Clamp<C>{bound(lo), bound(hi)}, scope.stream());
    } else {
      EMBER_FAIL("clamp kernel (cuda): dtype bool is not supported");
    }
  });
}

// leaky_relu and elu: floating dtypes only, as on the CPU.
template <template <class> class Op>
void scalar_unary_kernel(const Tensor& out, const Tensor& in, double alpha) {
  const OpScope scope(out);
  visit_cuda_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T>) {
      using C = compute_t<T>;
      unary<Op<C>, T>(data<T>(in), layout_of(in), mutable_data<T>(out), layout_of(out), Op<C>{static_cast<C>(alpha)},
                      scope.stream());
    } else {
      EMBER_FAIL("unary kernel (cuda): dtype ", dtype_name(in.dtype()), " is not supported");
    }
  });
}

void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  const OpScope scope(out);
  visit_cuda_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    select<T>(data<bool>(cond), layout_of(cond), data<T>(a), layout_of(a), data<T>(b), layout_of(b),
              mutable_data<T>(out), layout_of(out), scope.stream());
  });
}

// Outputs of the creation ops are contiguous (core allocates them).
void arange_kernel(const Tensor& out, double start, double step) {
  const OpScope scope(out);
  visit_cuda_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    arange<T>(mutable_data<T>(out), out.numel(), start, step, scope.stream());
  });
}

void linspace_kernel(const Tensor& out, double start, double end) {
  const OpScope scope(out);
  visit_cuda_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    linspace<T>(mutable_data<T>(out), out.numel(), start, end, scope.stream());
  });
}

}  // namespace

void register_elementwise() {
  constexpr DeviceType cuda = DeviceType::CUDA;
  neg_stub.set(cuda, unary_kernel<ops::Neg>);
  abs_stub.set(cuda, unary_kernel<ops::Abs>);
  exp_stub.set(cuda, unary_kernel<ops::Exp>);
  log_stub.set(cuda, unary_kernel<ops::Log>);
  sqrt_stub.set(cuda, unary_kernel<ops::Sqrt>);
  rsqrt_stub.set(cuda, unary_kernel<ops::Rsqrt>);
  relu_stub.set(cuda, unary_kernel<ops::Relu>);
  gelu_stub.set(cuda, unary_kernel<ops::Gelu>);
  gelu_tanh_stub.set(cuda, unary_kernel<ops::GeluTanh>);
  erf_stub.set(cuda, unary_kernel<ops::Erf>);
  tanh_stub.set(cuda, unary_kernel<ops::Tanh>);
  sigmoid_stub.set(cuda, unary_kernel<ops::Sigmoid>);
  sin_stub.set(cuda, unary_kernel<ops::Sin>);
  cos_stub.set(cuda, unary_kernel<ops::Cos>);
  silu_stub.set(cuda, unary_kernel<ops::Silu>);
  leaky_relu_stub.set(cuda, scalar_unary_kernel<ops::LeakyRelu>);
  elu_stub.set(cuda, scalar_unary_kernel<ops::Elu>);

  add_stub.set(cuda, binary_kernel<ops::Add>);
  sub_stub.set(cuda, binary_kernel<ops::Sub>);
  mul_stub.set(cuda, binary_kernel<ops::Mul>);
  div_stub.set(cuda, binary_kernel<ops::Div>);
  pow_stub.set(cuda, binary_kernel<ops::Pow>);
  maximum_stub.set(cuda, binary_kernel<ops::Maximum>);
  minimum_stub.set(cuda, binary_kernel<ops::Minimum>);
  eq_stub.set(cuda, binary_kernel<ops::Eq>);
  ne_stub.set(cuda, binary_kernel<ops::Ne>);
  lt_stub.set(cuda, binary_kernel<ops::Lt>);
  le_stub.set(cuda, binary_kernel<ops::Le>);
  gt_stub.set(cuda, binary_kernel<ops::Gt>);
  ge_stub.set(cuda, binary_kernel<ops::Ge>);
  relu_backward_stub.set(cuda, binary_kernel<ops::ReluBackward>);

  clamp_stub.set(cuda, clamp_kernel);
  where_stub.set(cuda, where_kernel);
  arange_stub.set(cuda, arange_kernel);
  linspace_stub.set(cuda, linspace_kernel);
}

}  // namespace ember::kernels::cuda
