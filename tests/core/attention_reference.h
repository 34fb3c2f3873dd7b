// The float64 references of scaled_dot_product_attention's tests (test_attention*.cpp):
// the output and the gradients of q, k and v by plain loops, each element with the
// rounding bound of the computation in the tested dtype; and a scoped EMBER_ATTENTION.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ember.h"
#include "reference.h"

namespace ember::test {

constexpr double kInf = std::numeric_limits<double>::infinity();

// EMBER_ATTENTION for the scope (it is read at each call).
class AttentionPath {
 public:
  explicit AttentionPath(const char* value) {
    if (const char* old = std::getenv("EMBER_ATTENTION")) saved_ = old;
    ::setenv("EMBER_ATTENTION", value, 1);
  }
  ~AttentionPath() {
    if (saved_) ::setenv("EMBER_ATTENTION", saved_->c_str(), 1);
    else ::unsetenv("EMBER_ATTENTION");
  }
  AttentionPath(const AttentionPath&) = delete;
  AttentionPath& operator=(const AttentionPath&) = delete;

 private:
  std::optional<std::string> saved_;
};

struct Reference {
  std::vector<double> out;
  std::vector<double> tol;  // per element: the rounding bound of the dtype's computation
  Shape shape;
  // Per element, the sum of its terms' absolute values (reference(): sum_j p_j |v_j|), on
  // which the bound of a computation with further roundings (16-bit operands) is built.
  std::vector<double> magnitude;
};

// softmax(q k^T scale + mask) v in double, row by row, over the broadcast batch. mask_kind:
// 0 none, 1 bool (true: takes part), 2 additive, 3 causal. Fully masked rows give zeros.
// tol: a dot product of E terms is off by gamma_E of the same on absolute values; the
// exponentials turn that into a relative error of the weights (twice: numerator and the
// sum), and the output sums S weighted values: so (2 gamma_(E+2) A + gamma_(2S+8)) B with
// A = max_j sum_e |q_e k_je| scale and B = sum_j p_j |v_j| (plus underflow).
inline Reference reference(const Tensor& q, const Tensor& k, const Tensor& v, int mask_kind, const Tensor& mask,
                    double scale, DType dtype) {
  const auto batch_of = [](const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); };
  Shape batch = broadcast_all({batch_of(q), batch_of(k), batch_of(v)});
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), Ev = v.size(-1);
  auto full = [&](const Tensor& t, int64_t r, int64_t c) {
    Shape s = batch;
    s.push_back(r);
    s.push_back(c);
    return values(t.to(kFloat64).expand(s).contiguous());
  };
  const std::vector<double> qv = full(q, L, E), kv = full(k, S, E), vv = full(v, S, Ev);
  std::vector<double> mv;
  if (mask_kind == 1 || mask_kind == 2) mv = full(mask, L, S);
  const int64_t B = shape_numel(batch);
  const double u = dtype_unit_roundoff(dtype);
  Reference r;
  r.shape = batch;
  r.shape.push_back(L);
  r.shape.push_back(Ev);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(static_cast<size_t>(S));
      double mx = -kInf, A = 0;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0, adot = 0;
        for (int64_t e = 0; e < E; ++e) {
          dot += qv[(b * L + i) * E + e] * kv[(b * S + j) * E + e];
          adot += std::fabs(qv[(b * L + i) * E + e] * kv[(b * S + j) * E + e]);
        }
        double sc = dot * scale;
        A = std::max(A, adot * std::fabs(scale));
        if (mask_kind == 1 && mv[(b * L + i) * S + j] == 0) sc = -kInf;
        if (mask_kind == 2) sc += mv[(b * L + i) * S + j];
        if (mask_kind == 3 && j > i) sc = -kInf;
        s[j] = sc;
        mx = std::max(mx, sc);
      }
      double total = 0;
      for (int64_t j = 0; j < S; ++j) total += mx == -kInf ? 0 : std::exp(s[j] - mx);
      for (int64_t c = 0; c < Ev; ++c) {
        double o = 0, bnd = 0;
        for (int64_t j = 0; j < S && mx != -kInf; ++j) {
          const double p = std::exp(s[j] - mx) / total, val = vv[(b * S + j) * Ev + c];
          o += p * val;
          bnd += p * std::fabs(val);
        }
        r.out.push_back(o);
        r.magnitude.push_back(bnd);
        r.tol.push_back((2 * gamma_n(static_cast<double>(E + 2), u) * A + gamma_n(static_cast<double>(2 * S + 8), u)) *
                            bnd +
                        64 * dtype_underflow(dtype) + (dtype == kFloat64 ? 1e-15 : 0));
      }
    }
  }
  return r;
}

inline Tensor bool_mask(const Shape& shape, uint64_t seed) {
  // About 60% of the keys take part; key 0 always does, so no row is fully masked.
  Tensor m = gt(random_tensor(shape, kFloat64, Layout::Contiguous, seed), scalar_tensor(-0.25, kFloat64));
  if (shape.back() > 0) m.narrow(-1, 0, 1).fill_(true);
  return m;
}

// The gradients of sum(out * dout) for q, k, v of one batch shape [B, ., .] (mask
// broadcast to [B, L, S]; mask_kind as for reference()): dS = P (dP - D), dP = dout v^T,
// D = rowsum(P dP); dq = scale dS k, dk = scale dS^T q, dv = P^T dout. The bound of each
// element: the same sums over absolute values (|dP| + |D| for dP - D) times gamma_n with n
// the roundings on a path (two dot products, the sums over S and L, exp and lse: under
// 2 (E + Ev + S + L) + 16), plus the weights' relative error 2 gamma_(E+2) A from the
// scores, A = max sum_e |q_e k_e| scale, as for the output.
struct GradReference {
  Reference dq, dk, dv;
};

inline GradReference reference_grads(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                                     int mask_kind, const Tensor& mask, double scale, DType dtype) {
  const int64_t B = q.size(0), L = q.size(1), S = k.size(1), E = q.size(2), Ev = v.size(2);
  const std::vector<double> qv = values(q), kv = values(k), vv = values(v), gv = values(dout);
  std::vector<double> mv;
  if (mask_kind == 1 || mask_kind == 2) mv = values(mask.to(kFloat64).expand({B, L, S}).contiguous());
  std::vector<double> P(static_cast<size_t>(B * L * S)), dS(P.size()), adS(P.size());
  double A = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i) {
      double mx = -kInf;
      std::vector<double> s(static_cast<size_t>(S));
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0, adot = 0;
        for (int64_t e = 0; e < E; ++e) {
          dot += qv[(b * L + i) * E + e] * kv[(b * S + j) * E + e];
          adot += std::fabs(qv[(b * L + i) * E + e] * kv[(b * S + j) * E + e]);
        }
        A = std::max(A, adot * std::fabs(scale));
        double sc = dot * scale;
        if (mask_kind == 1 && mv[(b * L + i) * S + j] == 0) sc = -kInf;
        if (mask_kind == 2) sc += mv[(b * L + i) * S + j];
        if (mask_kind == 3 && j > i) sc = -kInf;
        s[j] = sc;
        mx = std::max(mx, sc);
      }
      double total = 0;
      for (int64_t j = 0; j < S; ++j) total += mx == -kInf ? 0 : std::exp(s[j] - mx);
      double D = 0, aD = 0;
      std::vector<double> dP(static_cast<size_t>(S)), adP(static_cast<size_t>(S));
      for (int64_t j = 0; j < S; ++j) {
        const size_t at = static_cast<size_t>((b * L + i) * S + j);
        P[at] = mx == -kInf ? 0 : std::exp(s[j] - mx) / total;
        for (int64_t c = 0; c < Ev; ++c) {
          dP[j] += gv[(b * L + i) * Ev + c] * vv[(b * S + j) * Ev + c];
          adP[j] += std::fabs(gv[(b * L + i) * Ev + c] * vv[(b * S + j) * Ev + c]);
        }
        D += P[at] * dP[j];
        aD += P[at] * adP[j];
      }
      for (int64_t j = 0; j < S; ++j) {
        const size_t at = static_cast<size_t>((b * L + i) * S + j);
        dS[at] = P[at] * (dP[j] - D);
        adS[at] = P[at] * (adP[j] + aD);
      }
    }
  const double u = dtype_unit_roundoff(dtype);
  const double rel =
      gamma_n(static_cast<double>(2 * (E + Ev + S + L) + 16), u) + 2 * gamma_n(static_cast<double>(E + 2), u) * A;
  const double floor = 64 * dtype_underflow(dtype) + (dtype == kFloat64 ? 1e-15 : 0);
  GradReference r;
  r.dq.shape = {B, L, E}, r.dk.shape = {B, S, E}, r.dv.shape = {B, S, Ev};
  for (Reference* x : {&r.dq, &r.dk, &r.dv}) {
    x->out.assign(static_cast<size_t>(shape_numel(x->shape)), 0.0);
    x->tol.assign(x->out.size(), 0.0);
  }
  const double as = std::fabs(scale);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = 0; j < S; ++j) {
        const size_t at = static_cast<size_t>((b * L + i) * S + j);
        for (int64_t e = 0; e < E; ++e) {
          const size_t qi = static_cast<size_t>((b * L + i) * E + e), kj = static_cast<size_t>((b * S + j) * E + e);
          r.dq.out[qi] += scale * dS[at] * kv[kj];
          r.dq.tol[qi] += as * adS[at] * std::fabs(kv[kj]);
          r.dk.out[kj] += scale * dS[at] * qv[qi];
          r.dk.tol[kj] += as * adS[at] * std::fabs(qv[qi]);
        }
        for (int64_t c = 0; c < Ev; ++c) {
          const size_t vj = static_cast<size_t>((b * S + j) * Ev + c), gi = static_cast<size_t>((b * L + i) * Ev + c);
          r.dv.out[vj] += P[at] * gv[gi];
          r.dv.tol[vj] += P[at] * std::fabs(gv[gi]);
        }
      }
  for (Reference* x : {&r.dq, &r.dk, &r.dv}) {
    x->magnitude = x->tol;
    for (double& t : x->tol) t = rel * t + floor;
  }
  return r;
}

}  // namespace ember::test
