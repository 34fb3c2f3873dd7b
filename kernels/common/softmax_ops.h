// The numerically stable softmax step, written once for the CPU loops and the CUDA
// kernels: the online normalizer of Milakov & Gimelshein ("Online normalizer calculation
// for softmax", 2018). A row's softmax needs its max m and d = sum exp(x - m); both are
// kept as a running pair that absorbs values one chunk at a time and merges with another
// pair, so a single read of the row gives both, in any order and split any way.
//
// Non-finite values follow PyTorch: a row of only -inf has d = 0 (so softmax gives 0/0 =
// NaN); +inf or NaN anywhere makes d NaN, and so every output of the row.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/macros.h"

namespace ember::kernels::ops {

// T is the compute type: float (also for float16 / bfloat16 data) or double.
template <class T>
struct OnlineSoftmax {
  T max;  // the largest value seen (-inf when none)
  T sum;  // sum of exp(x - shift(max)) over the values seen

  EMBER_HD static OnlineSoftmax empty() { return {T(-INFINITY), T(0)}; }

  // What exp's argument is taken relative to: the max, or 0 while every value seen is
  // -inf (then exp(-inf - 0) = 0 where exp(-inf - (-inf)) would be NaN).
  EMBER_HD static T shift(T m) { return m == T(-INFINITY) ? T(0) : m; }

  // Absorbs n values (a chunk a thread holds): one exp per value plus one to rescale.
  EMBER_HD void add(const T* v, int n) {
    using std::exp;
    T m = max;
    for (int i = 0; i < n; ++i) m = v[i] > m ? v[i] : m;
    const T s = shift(m);
    T d = sum * exp(max - s);
    for (int i = 0; i < n; ++i) d += exp(v[i] - s);
    max = m;
    sum = d;
  }

  // The pair of n values that replaces each by exp(v - shift(max)), the terms of its sum:
  // a kernel that keeps the values then finishes softmax with one multiply each
  // (exp_scale), one exp per value in all.
  EMBER_HD static OnlineSoftmax of_exps(T* v, int n) {
    using std::exp;
    T m = T(-INFINITY);
    for (int i = 0; i < n; ++i) m = v[i] > m ? v[i] : m;
    const T s = shift(m);
    T d = 0;
    for (int i = 0; i < n; ++i) {
      v[i] = exp(v[i] - s);
      d += v[i];
    }
    return {m, d};
  }

  // What turns of_exps' values for this pair into softmax over `whole` (a merge of it):
  // exp(shift(max) - shift(whole.max)) / whole.sum.
  EMBER_HD T exp_scale(const OnlineSoftmax& whole) const {
    using std::exp;
    return exp(shift(max) - shift(whole.max)) / whole.sum;
  }

  // The pair of the union of both sets. The operands go in a fixed order (larger max,
  // then larger sum, first) because a compiler may fuse one product with the addition,
  // which is not symmetric: so merge(a, b) and merge(b, a) agree to the last bit, and a
  // butterfly leaves the same pair in every lane.
  EMBER_HD OnlineSoftmax merge(const OnlineSoftmax& o) const {
    using std::exp;
    const bool swap = o.max > max || (o.max == max && o.sum > sum);
    const OnlineSoftmax& a = swap ? o : *this;
    const OnlineSoftmax& b = swap ? *this : o;
    const T s = shift(a.max);
    return {a.max, a.sum * exp(a.max - s) + b.sum * exp(b.max - s)};
  }

  // log sum exp(x) of the values seen: softmax(x) = exp(x - lse), log_softmax(x) = x - lse.
  EMBER_HD T log_sum_exp() const {
    using std::log;
    return shift(max) + log(sum);
  }
};

// Cross entropy with class weights w_c (all 1 when none, W = sum w_c) and label smoothing
// eps over C classes, PyTorch's F.cross_entropy: the target t gets probability 1 - eps +
// eps / C, every class eps / C, each term weighted by its class. For a row with
// log-sum-exp lse and log p_c = x_c - lse:
//   loss = (1 - eps) w_t (lse - x_t) + eps / C sum_c w_c (lse - x_c)
//   d loss / d x_j = p_j ((1 - eps) w_t + eps W / C) - (1 - eps) w_t [j == t] - eps / C w_j.
// Without weights and smoothing these are lse - x_t and p_j - [j == t], bit for bit.
template <class T>
struct CrossEntropyTerms {
  T target;  // (1 - eps) w_t
  T each;    // eps / C, per unit of class weight

  EMBER_HD static CrossEntropyTerms of(T eps, int64_t classes, T w_t) { return {(T(1) - eps) * w_t, eps / T(classes)}; }

  // nll = lse - x_t; smooth = sum_c w_c (lse - x_c), read only when eps > 0 (a row of
  // -inf would give 0 * inf).
  EMBER_HD T loss(T nll, T smooth) const { return each > T(0) ? target * nll + each * smooth : target * nll; }

  // The gradient for probability p_j of class j (weight w_j) whose classes weigh W in all.
  EMBER_HD T grad(T p, bool is_target, T w_j, T weight_sum) const {
    const T g = p * (target + each * weight_sum) - (is_target ? target : T(0));
    return each > T(0) ? g - each * w_j : g;
  }
};

}  // namespace ember::kernels::ops
