// The math of every binary elementwise op, shared by the CPU loops and the CUDA kernels.
// T is the compute type (see unary_ops.h); comparisons return bool.
#pragma once

#include <cmath>

#include "core/macros.h"

namespace ember::kernels::ops {

struct Add { template <class T> EMBER_HD T operator()(T a, T b) const { return a + b; } };
struct Sub { template <class T> EMBER_HD T operator()(T a, T b) const { return a - b; } };
struct Mul { template <class T> EMBER_HD T operator()(T a, T b) const { return a * b; } };
struct Div { template <class T> EMBER_HD T operator()(T a, T b) const { return a / b; } };
struct Pow {
  template <class T> EMBER_HD T operator()(T a, T b) const {
    using std::pow;
    return static_cast<T>(pow(a, b));
  }
};
// maximum/minimum propagate NaN from either side, as PyTorch's do.
struct Maximum {
  template <class T> EMBER_HD T operator()(T a, T b) const { return a != a ? a : (b != b ? b : (a > b ? a : b)); }
};
struct Minimum {
  template <class T> EMBER_HD T operator()(T a, T b) const { return a != a ? a : (b != b ? b : (a < b ? a : b)); }
};
// relu's gradient from its output: g where y > 0, else 0 (relu'(0) = 0, as in PyTorch).
// One pass instead of a comparison, a bool tensor and a where.
struct ReluBackward { template <class T> EMBER_HD T operator()(T g, T y) const { return y > T(0) ? g : T(0); } };
// tanh's gradient from its output y: g (1 - y^2).
struct TanhBackward { template <class T> EMBER_HD T operator()(T g, T y) const { return g * (T(1) - y * y); } };
struct Eq { template <class T> EMBER_HD bool operator()(T a, T b) const { return a == b; } };
struct Ne { template <class T> EMBER_HD bool operator()(T a, T b) const { return a != b; } };
struct Lt { template <class T> EMBER_HD bool operator()(T a, T b) const { return a < b; } };
struct Le { template <class T> EMBER_HD bool operator()(T a, T b) const { return a <= b; } };
struct Gt { template <class T> EMBER_HD bool operator()(T a, T b) const { return a > b; } };
struct Ge { template <class T> EMBER_HD bool operator()(T a, T b) const { return a >= b; } };

}  // namespace ember::kernels::ops
