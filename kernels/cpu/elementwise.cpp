// CPU elementwise kernels: unary and binary math (kernels/common functors), clamp,
// where, copy with dtype conversion, and fill. Each is one StridedLoop over its operands;
// the inner loop has a contiguous case (which GCC vectorizes for the arithmetic ops) and
// a general strided case. Memory-bound: add moves 12 bytes per float32 element.
#include <cstring>
#include <limits>

#include "kernels/common/binary_ops.h"
#include "kernels/common/unary_ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/loops.h"

namespace ember::kernels::cpu {
namespace {

template <class T> T& at(char* p, int64_t stride, int64_t i) { return *reinterpret_cast<T*>(p + i * stride); }

// Float-only math (exp, tanh, ...) is instantiated for floating T only; core converts
// integer inputs to float32 first. Sign and max ops also exist for integers.
template <class Op> inline constexpr bool kIntegerUnary =
    std::is_same_v<Op, ops::Neg> || std::is_same_v<Op, ops::Abs> || std::is_same_v<Op, ops::Relu>;

template <class T, class F>
void unary_loop(const Tensor& out, const Tensor& in, const F& f) {
  using C = compute_t<T>;
  StridedLoop<2>({&out, &in}).run([&](char** p, const int64_t* s, int64_t n) {
    T* o = reinterpret_cast<T*>(p[0]);
    const T* a = reinterpret_cast<const T*>(p[1]);
    if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(f(static_cast<C>(a[i])));
    } else {
      for (int64_t i = 0; i < n; ++i) at<T>(p[0], s[0], i) = static_cast<T>(f(static_cast<C>(at<T>(p[1], s[1], i))));
    }
  });
}

template <class Op>
void unary_kernel(const Tensor& out, const Tensor& in) {
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T> || (kIntegerUnary<Op> && !std::is_same_v<T, bool>)) {
      unary_loop<T>(out, in, Op{});
    } else {
      EMBER_FAIL("unary kernel: dtype ", dtype_name(in.dtype()), " is not supported");
    }
  });
}

template <class T, class R, class F>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, const F& f) {
  using C = compute_t<T>;
  StridedLoop<3>({&out, &a, &b}).run([&](char** p, const int64_t* s, int64_t n) {
    R* o = reinterpret_cast<R*>(p[0]);
    const T* x = reinterpret_cast<const T*>(p[1]);
    const T* y = reinterpret_cast<const T*>(p[2]);
    if (s[0] == sizeof(R) && s[1] == sizeof(T) && s[2] == sizeof(T)) {
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(static_cast<C>(x[i]), static_cast<C>(y[i])));
    } else if (s[0] == sizeof(R) && s[1] == sizeof(T) && s[2] == 0) {  // tensor op scalar
      const C yv = static_cast<C>(*y);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(static_cast<C>(x[i]), yv));
    } else if (s[0] == sizeof(R) && s[1] == 0 && s[2] == sizeof(T)) {  // scalar op tensor
      const C xv = static_cast<C>(*x);
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<R>(f(xv, static_cast<C>(y[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        at<R>(p[0], s[0], i) =
            static_cast<R>(f(static_cast<C>(at<const T>(p[1], s[1], i)), static_cast<C>(at<const T>(p[2], s[2], i))));
    }
  });
}

template <class Op>
inline constexpr bool kComparison = std::is_same_v<Op, ops::Eq> || std::is_same_v<Op, ops::Ne> ||
                                    std::is_same_v<Op, ops::Lt> || std::is_same_v<Op, ops::Le> ||
                                    std::is_same_v<Op, ops::Gt> || std::is_same_v<Op, ops::Ge>;

template <class Op>
void binary_kernel(const Tensor& out, const Tensor& a, const Tensor& b) {
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kComparison<Op>) {
      binary_loop<T, bool>(out, a, b, Op{});
    } else if constexpr (!std::is_same_v<T, bool>) {
      binary_loop<T, T>(out, a, b, Op{});
    } else {
      EMBER_FAIL("binary kernel: dtype bool is not supported");
    }
  });
}

void clamp_kernel(const Tensor& out, const Tensor& in, double lo, double hi) {
  visit_dtype(in.dtype(), [&](auto tag) {
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
      unary_loop<T>(out, in, ops::Clamp<C>{bound(lo), bound(hi)});
    } else {
      EMBER_FAIL("clamp kernel: dtype bool is not supported");
    }
  });
}

// leaky_relu and elu: floating dtypes only (core converts nothing: it refuses the others).
template <template <class> class Op>
void scalar_unary_kernel(const Tensor& out, const Tensor& in, double alpha) {
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (is_float_v<T>) {
      using C = compute_t<T>;
      unary_loop<T>(out, in, Op<C>{static_cast<C>(alpha)});
    } else {
      EMBER_FAIL("unary kernel: dtype ", dtype_name(in.dtype()), " is not supported");
    }
  });
}

void where_kernel(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    StridedLoop<4>({&out, &cond, &a, &b}).run([&](char** p, const int64_t* s, int64_t n) {
      if (s[0] == sizeof(T) && s[1] == 1 && s[2] == sizeof(T) && s[3] == sizeof(T)) {
        T* o = reinterpret_cast<T*>(p[0]);
        // Read as bytes: GCC 12 does not vectorize a loop that loads bool.
        const uint8_t* c = reinterpret_cast<const uint8_t*>(p[1]);
        const T* x = reinterpret_cast<const T*>(p[2]);
        const T* y = reinterpret_cast<const T*>(p[3]);
        for (int64_t i = 0; i < n; ++i) {
          const T xv = x[i], yv = y[i];  // both loaded, so that GCC blends instead of branching
          o[i] = c[i] != 0 ? xv : yv;
        }
      } else {
        for (int64_t i = 0; i < n; ++i)
          at<T>(p[0], s[0], i) = at<const bool>(p[1], s[1], i) ? at<const T>(p[2], s[2], i) : at<const T>(p[3], s[3], i);
      }
    });
  });
}

void copy_kernel(const Tensor& dst, const Tensor& src) {
  visit_dtype(dst.dtype(), [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    visit_dtype(src.dtype(), [&](auto stag) {
      using S = typename decltype(stag)::type;
      StridedLoop<2>({&dst, &src}).run([&](char** p, const int64_t* s, int64_t n) {
        if constexpr (std::is_same_v<D, S>) {
          if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
            std::memcpy(p[0], p[1], n * sizeof(D));
            return;
          }
        }
        if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
          D* o = reinterpret_cast<D*>(p[0]);
          const S* a = reinterpret_cast<const S*>(p[1]);
          for (int64_t i = 0; i < n; ++i) o[i] = cast<D>(a[i]);
        } else {
          for (int64_t i = 0; i < n; ++i) at<D>(p[0], s[0], i) = cast<D>(at<const S>(p[1], s[1], i));
        }
      });
    });
  });
}

void fill_kernel(const Tensor& dst, Scalar value) {
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = value.is_integral() ? cast<T>(value.to_int()) : cast<T>(value.to_double());
    StridedLoop<1>({&dst}).run([&](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) at<T>(p[0], s[0], i) = v;
    });
  });
}

}  // namespace

void register_elementwise() {
  constexpr DeviceType cpu = DeviceType::CPU;
  neg_stub.set(cpu, unary_kernel<ops::Neg>);
  abs_stub.set(cpu, unary_kernel<ops::Abs>);
  exp_stub.set(cpu, unary_kernel<ops::Exp>);
  log_stub.set(cpu, unary_kernel<ops::Log>);
  sqrt_stub.set(cpu, unary_kernel<ops::Sqrt>);
  rsqrt_stub.set(cpu, unary_kernel<ops::Rsqrt>);
  relu_stub.set(cpu, unary_kernel<ops::Relu>);
  gelu_stub.set(cpu, unary_kernel<ops::Gelu>);
  gelu_tanh_stub.set(cpu, unary_kernel<ops::GeluTanh>);
  erf_stub.set(cpu, unary_kernel<ops::Erf>);
  tanh_stub.set(cpu, unary_kernel<ops::Tanh>);
  sigmoid_stub.set(cpu, unary_kernel<ops::Sigmoid>);
  sin_stub.set(cpu, unary_kernel<ops::Sin>);
  cos_stub.set(cpu, unary_kernel<ops::Cos>);
  silu_stub.set(cpu, unary_kernel<ops::Silu>);
  leaky_relu_stub.set(cpu, scalar_unary_kernel<ops::LeakyRelu>);
  elu_stub.set(cpu, scalar_unary_kernel<ops::Elu>);

  add_stub.set(cpu, binary_kernel<ops::Add>);
  sub_stub.set(cpu, binary_kernel<ops::Sub>);
  mul_stub.set(cpu, binary_kernel<ops::Mul>);
  div_stub.set(cpu, binary_kernel<ops::Div>);
  pow_stub.set(cpu, binary_kernel<ops::Pow>);
  maximum_stub.set(cpu, binary_kernel<ops::Maximum>);
  minimum_stub.set(cpu, binary_kernel<ops::Minimum>);
  eq_stub.set(cpu, binary_kernel<ops::Eq>);
  ne_stub.set(cpu, binary_kernel<ops::Ne>);
  lt_stub.set(cpu, binary_kernel<ops::Lt>);
  le_stub.set(cpu, binary_kernel<ops::Le>);
  gt_stub.set(cpu, binary_kernel<ops::Gt>);
  ge_stub.set(cpu, binary_kernel<ops::Ge>);
  relu_backward_stub.set(cpu, binary_kernel<ops::ReluBackward>);

  clamp_stub.set(cpu, clamp_kernel);
  where_stub.set(cpu, where_kernel);
  copy_stub.set(cpu, copy_kernel);
  fill_stub.set(cpu, fill_kernel);
}

}  // namespace ember::kernels::cpu
