// The pointwise math of the LSTM and GRU cells (PyTorch's gate orders: LSTM i, f, g, o;
// GRU r, z, n), written once for the CPU loops and the CUDA kernels. V is the value type:
// a scalar (float, double) or the CPU's SIMD vector, which brings its own arithmetic
// operators and a Splat specialization; Act supplies sigmoid and tanh for V (ScalarAct
// below for scalars, the CPU backend's vector versions for its vectors).
#pragma once

#include <cstdint>

#include "core/macros.h"
#include "kernels/common/unary_ops.h"

namespace ember::kernels::ops {

// The constant c as a V.
template <class V>
struct Splat {
  EMBER_HD static V of(double c) { return V(c); }
};

struct ScalarAct {
  template <class T> EMBER_HD static T sigmoid(T x) { return Sigmoid{}(x); }
  template <class T> EMBER_HD static T tanh(T x) { return Tanh{}(x); }
};

// LSTM forward of one element: pre-activation gates in, activated gates (saved for
// backward), c = f c_prev + i g and h = o tanh(c) out.
template <class Act>
struct LstmForward {
  template <class V>
  EMBER_HD void operator()(V gi, V gf, V gg, V go, V c_prev, V& i, V& f, V& g, V& o, V& c, V& h) const {
    i = Act::sigmoid(gi);
    f = Act::sigmoid(gf);
    g = Act::tanh(gg);
    o = Act::sigmoid(go);
    c = f * c_prev + i * g;
    h = o * Act::tanh(c);
  }
};

// LSTM backward of one element: dh and dc (the gradient reaching c from outside the
// cell), the activated gates, c_prev and c give the pre-activation gates' gradients and
// dc_prev. tanh(c) is recomputed rather than saved.
template <class Act>
struct LstmBackward {
  template <class V>
  EMBER_HD void operator()(V dh, V dc, V i, V f, V g, V o, V c_prev, V c, V& dgi, V& dgf, V& dgg, V& dgo,
                           V& dc_prev) const {
    const V one = Splat<V>::of(1);
    const V tc = Act::tanh(c);
    const V dct = dc + dh * o * (one - tc * tc);
    dgi = dct * g * i * (one - i);
    dgf = dct * c_prev * f * (one - f);
    dgg = dct * i * (one - g * g);
    dgo = dh * tc * o * (one - o);
    dc_prev = dct * f;
  }
};

// GRU forward of one element: gi = x W_ih^T + b_ih and gh = h W_hh^T + b_hh per gate;
// r, z = sigmoid(gi + gh), n = tanh(gi_n + r gh_n), h = (1 - z) n + z h_prev, computed as
// n + z (h_prev - n). r, z, n and gh_n are saved for backward.
template <class Act>
struct GruForward {
  template <class V>
  EMBER_HD void operator()(V gir, V giz, V gin, V ghr, V ghz, V ghn, V h_prev, V& r, V& z, V& n, V& h) const {
    r = Act::sigmoid(gir + ghr);
    z = Act::sigmoid(giz + ghz);
    n = Act::tanh(gin + r * ghn);
    h = n + z * (h_prev - n);
  }
};

// GRU backward of one element from dh, the saved r, z, n, gh_n and h_prev: the gradients
// of gi's three gates (the r and z ones equal gh's), gh_n's, and dh_prev.
struct GruBackward {
  template <class V>
  EMBER_HD void operator()(V dh, V r, V z, V n, V ghn, V h_prev, V& dr, V& dz, V& dgin, V& dghn, V& dh_prev) const {
    const V one = Splat<V>::of(1);
    const V dn = dh * (one - z) * (one - n * n);
    dz = dh * (h_prev - n) * z * (one - z);
    dr = dn * ghn * r * (one - r);
    dgin = dn;
    dghn = dn * r;
    dh_prev = dh * z;
  }
};

// What the hand-written layer loops (the CPU's, CUDA's hand-written variant) keep for the
// backward per step and batch row, in elements of the layer's dtype: for an LSTM (4 gates)
// the activated gates i, f, g, o then c after the step (5 H); for a GRU (3) r, z, n and
// gh_n (4 H); for an RNN (1) nothing: its backward works from y.
constexpr int64_t rnn_reserve_row(int64_t gates, int64_t H) { return gates == 4 ? 5 * H : gates == 3 ? 4 * H : 0; }

}  // namespace ember::kernels::ops
