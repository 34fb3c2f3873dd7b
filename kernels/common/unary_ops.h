// The math of every unary elementwise op, written once for the CPU loops and the CUDA
// kernels. T is the compute type: float for float32/bfloat16/float16, double for float64,
// the integer type itself where an integer version exists.
#pragma once

#include <cmath>

#include "core/macros.h"

namespace ember::kernels::ops {

struct Neg { template <class T> EMBER_HD T operator()(T x) const { return -x; } };
struct Abs { template <class T> EMBER_HD T operator()(T x) const { return x < T(0) ? -x : x; } };
struct Exp { template <class T> EMBER_HD T operator()(T x) const { using std::exp; return exp(x); } };
struct Log { template <class T> EMBER_HD T operator()(T x) const { using std::log; return log(x); } };
struct Sqrt { template <class T> EMBER_HD T operator()(T x) const { using std::sqrt; return sqrt(x); } };
struct Rsqrt {
  template <class T> EMBER_HD T operator()(T x) const { using std::sqrt; return T(1) / sqrt(x); }
};
// max(x, 0) that keeps NaN, as PyTorch's relu does.
struct Relu { template <class T> EMBER_HD T operator()(T x) const { return x < T(0) ? T(0) : x; } };
// Exact GELU: x * Phi(x) = 0.5 x erfc(-x / sqrt 2). Not 0.5 x (1 + erf(x / sqrt 2)): where
// erf is near -1 the sum cancels, and the few ulp of the device's erf grow a hundredfold.
struct Gelu {
  template <class T> EMBER_HD T operator()(T x) const {
    using std::erfc;
    return T(0.5) * x * erfc(x * T(-0.70710678118654752440));
  }
};
struct Erf { template <class T> EMBER_HD T operator()(T x) const { using std::erf; return erf(x); } };
struct Tanh { template <class T> EMBER_HD T operator()(T x) const { using std::tanh; return tanh(x); } };
// 1 / (1 + e^-x), written so that neither branch overflows.
struct Sigmoid {
  template <class T> EMBER_HD T operator()(T x) const {
    using std::exp;
    if (x >= T(0)) return T(1) / (T(1) + exp(-x));
    T e = exp(x);
    return e / (T(1) + e);
  }
};
// GELU's tanh approximation, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3),
// computed as x sigmoid(2u), its equal without the cancellation where tanh(u) is near -1.
struct GeluTanh {
  template <class T> EMBER_HD T operator()(T x) const {
    return x * Sigmoid{}(T(1.59576912160573071175) * (x + T(0.044715) * x * x * x));
  }
};
struct Sin { template <class T> EMBER_HD T operator()(T x) const { using std::sin; return sin(x); } };
struct Cos { template <class T> EMBER_HD T operator()(T x) const { using std::cos; return cos(x); } };
// x sigmoid(x), as x / (1 + e^-x) like PyTorch; e^-x overflowing to inf gives -0, the limit.
struct Silu {
  template <class T> EMBER_HD T operator()(T x) const { using std::exp; return x / (T(1) + exp(-x)); }
};
// x where x > 0, slope x elsewhere (NaN stays NaN).
template <class T>
struct LeakyRelu {
  T slope;
  EMBER_HD T operator()(T x) const { return x > T(0) ? x : x * slope; }
};
// x where x > 0, alpha (e^x - 1) elsewhere, with expm1 for small |x| as PyTorch.
template <class T>
struct Elu {
  T alpha;
  EMBER_HD T operator()(T x) const { using std::expm1; return x > T(0) ? x : alpha * expm1(x); }
};
// Clamp to [lo, hi]; NaN stays NaN (PyTorch's clamp).
template <class T>
struct Clamp {
  T lo, hi;
  EMBER_HD T operator()(T x) const {
    if (x != x) return x;
    return x < lo ? lo : (x > hi ? hi : x);
  }
};

}  // namespace ember::kernels::ops
