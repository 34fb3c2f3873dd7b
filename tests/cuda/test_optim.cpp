// The fused multi-tensor optimizer kernels (kernels/cuda/optim.cuh) against the CPU
// backend's sgd_step_ / adam_step_, over several steps, on lists of tensors of awkward
// sizes and alignments, and on lists longer than one launch's metadata holds.
//
// Tolerances. Both backends run the same functor (kernels/common/optim_ops.h) in the same
// type, so each is within a few roundings per operation of exact arithmetic on the same
// inputs; they differ where a compiler contracts a * b + c into one fused multiply-add
// or not. The float32 / float64 checks bound each element by twice (both sides) the
// rounding error a Tracker propagates through the steps from the magnitudes of each
// update's terms (see Tracker). The 16-bit parameter checks allow one 16-bit ulp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <span>
#include <vector>

#include "core/ops.h"
#include "kernels/cuda/optim.cuh"
#include "tests/cuda/harness.h"

namespace ember::kernels::cuda {
namespace {

using test::DeviceArray;
using test::from_doubles;
using test::random_doubles;

// A device tensor of n elements followed by kGuard sentinel elements no kernel may write,
// `offset` elements after an aligned address (1: not 16-byte aligned).
constexpr size_t kGuard = 5;
constexpr double kSentinel = -768.0;  // exact in every element type

template <class T>
class Guarded {
 public:
  Guarded(const std::vector<T>& values, size_t offset) : n_(values.size()), a_(values.size() + kGuard, offset) {
    std::vector<T> all = values;
    all.resize(n_ + kGuard, test::from_double<T>(kSentinel));
    a_.upload(all);
  }
  T* data() const { return a_.data(); }
  // The n elements as doubles; fails the test if a sentinel after them changed.
  std::vector<double> host() const {
    const std::vector<T> all = a_.host();
    for (size_t i = n_; i < all.size(); ++i)
      EXPECT_EQ(test::to_double(all[i]), kSentinel) << "written past the end of a " << n_ << "-element tensor";
    std::vector<double> out(n_);
    for (size_t i = 0; i < n_; ++i) out[i] = test::to_double(all[i]);
    return out;
  }

 private:
  size_t n_;
  DeviceArray<T> a_;
};

// A tensor's size and the alignment offsets (elements) of its param, grad and two states.
struct Layout {
  int64_t n;
  size_t offset[4];
};

// Every awkward size (and one of many tiles), each with everything aligned, only the
// gradient misaligned, everything misaligned by one element (a head of 3 float32
// elements before the vectors, Note [Aligned body]) or by three (a head of one), and
// only the last state misaligned.
std::vector<Layout> awkward_layouts() {
  std::vector<int64_t> sizes = test::kAwkwardSizes;
  sizes.push_back(70001);
  std::vector<Layout> out;
  for (int64_t n : sizes) {
    out.push_back({n, {0, 0, 0, 0}});
    out.push_back({n, {0, 1, 0, 0}});
    out.push_back({n, {1, 1, 1, 1}});
    out.push_back({n, {3, 3, 3, 3}});
    out.push_back({n, {0, 0, 0, 1}});
  }
  return out;
}

// `count` tensors of random sizes in [0, 300] and cycling alignments.
std::vector<Layout> many_layouts(size_t count) {
  std::vector<Layout> out;
  const auto sizes = random_doubles(count, 99, 0, 301);
  for (size_t i = 0; i < count; ++i) out.push_back({int64_t(sizes[i]), {i % 2, i % 3 == 0, i % 5 == 0, i % 7 == 0}});
  return out;
}

template <class T>
DType dtype_of() {
  return std::is_same_v<T, double> ? kFloat64 : kFloat32;
}

// Values representable in T, as doubles (so CPU and device start from the same numbers).
template <class T>
std::vector<double> representable(size_t n, uint32_t seed) {
  std::vector<double> v = random_doubles(n, seed);
  for (double& x : v) x = double(T(x));
  return v;
}

// One parameter on both backends: CPU tensors and device copies.
template <class T>
struct Param {
  Layout layout;
  Tensor p, s1, s2;  // s1: momentum buffer or exp_avg; s2: exp_avg_sq
  std::unique_ptr<Guarded<T>> dp, ds1, ds2;
};

template <class T>
std::vector<Param<T>> make_params(const std::vector<Layout>& layouts, uint32_t seed) {
  std::vector<Param<T>> params;
  for (const Layout& l : layouts) {
    const auto p = representable<T>(size_t(l.n), seed++);
    const std::vector<double> zeros(size_t(l.n), 0.0);
    Param<T> q{l, tensor(p, {l.n}, dtype_of<T>()), tensor(zeros, {l.n}, dtype_of<T>()),
               tensor(zeros, {l.n}, dtype_of<T>()), nullptr, nullptr, nullptr};
    q.dp = std::make_unique<Guarded<T>>(from_doubles<T>(p), l.offset[0]);
    q.ds1 = std::make_unique<Guarded<T>>(from_doubles<T>(zeros), l.offset[2]);
    q.ds2 = std::make_unique<Guarded<T>>(from_doubles<T>(zeros), l.offset[3]);
    params.push_back(std::move(q));
  }
  return params;
}

// A fresh gradient per parameter: CPU tensors and device copies (at the layout's offset).
template <class T>
struct Grads {
  std::vector<Tensor> cpu;
  std::vector<std::unique_ptr<Guarded<T>>> dev;
  std::vector<std::vector<double>> values;
};
template <class T>
Grads<T> make_grads(const std::vector<Param<T>>& params, uint32_t seed) {
  Grads<T> out;
  for (const Param<T>& q : params) {
    const auto g = representable<T>(size_t(q.layout.n), seed++);
    out.cpu.push_back(tensor(g, {q.layout.n}, dtype_of<T>()));
    out.dev.push_back(std::make_unique<Guarded<T>>(from_doubles<T>(g), q.layout.offset[1]));
    out.values.push_back(g);
  }
  return out;
}

// The rounding error of one tensor's update run in a type of unit roundoff u, from exact
// arithmetic on the same inputs, per element: the functor's steps run in double (the
// values whose terms' magnitudes each rounding scales) beside the bounds e_* on each
// state. A step of k roundings on terms t_j costs gamma_k sum |t_j|; an error already in
// an operand carries through with the operand's coefficient (first order):
//  SGD  d = g + wd p                 gamma_2 (|g| + wd |p|)          + wd e_p
//       buf = mu buf + (1 - damp) d  gamma_3 (mu |buf| + (1-damp)|d|) + mu e_buf + (1-damp) e_d
//       d = d + mu buf (Nesterov)    gamma_2 (|d| + mu |buf|)        + e_d + mu e_buf
//       p = p - lr d                 gamma_2 (|p| + lr |d|)          + e_p + lr e_d
//  Adam p = decay p                  u |p|                           + decay e_p
//       g = g + l2 p                 gamma_2 (|g| + l2 |p|)          + l2 e_p
//       m = b1 m + (1 - b1) g        gamma_3 (b1 |m| + (1-b1) |g|)   + b1 e_m + (1-b1) e_g
//       v = b2 v + (1 - b2) g g      gamma_4 (b2 v + (1-b2) g^2)     + b2 e_v + 2 (1-b2) |g| e_g
//       den = sqrt(v) c + eps        gamma_3 (sqrt(v) c + eps)       + c e_v / (2 sqrt v)
//       p = p - step m / den         gamma_3 (|p| + |upd|)           + e_p + |upd| (e_m / |m| + e_den / den)
// (sqrt correctly rounded, one rounding; the constants are rounded to T alike on both sides.)
struct Tracker {
  std::vector<double> p, s1, s2, ep, e1, e2;
  double u;
  Tracker(std::vector<double> p0, double u_)
      : p(std::move(p0)), s1(p.size(), 0), s2(p.size(), 0), ep(p.size(), 0), e1(p.size(), 0), e2(p.size(), 0), u(u_) {}

  void sgd(const std::vector<double>& g, const ops::SgdUpdate& o) {
    const double g2 = test::gamma_n(2, u), g3 = test::gamma_n(3, u), mu = o.momentum, damp = 1 - o.dampening;
    for (size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + o.weight_decay * p[i];
      double ed = g2 * (std::abs(g[i]) + o.weight_decay * std::abs(p[i])) + o.weight_decay * ep[i];
      if (mu != 0) {
        if (o.first_step) {
          s1[i] = d;
          e1[i] = ed;
        } else {
          e1[i] = g3 * (mu * std::abs(s1[i]) + damp * std::abs(d)) + mu * e1[i] + damp * ed;
          s1[i] = mu * s1[i] + damp * d;
        }
        if (o.nesterov) {
          ed = g2 * (std::abs(d) + mu * std::abs(s1[i])) + ed + mu * e1[i];
          d = d + mu * s1[i];
        } else {
          d = s1[i];
          ed = e1[i];
        }
      }
      ep[i] = g2 * (std::abs(p[i]) + o.lr * std::abs(d)) + ep[i] + o.lr * ed;
      p[i] -= o.lr * d;
    }
  }

  void adam(const std::vector<double>& g0, const ops::AdamUpdate& o) {
    const double decay = o.decoupled ? 1 - o.lr * o.weight_decay : 1, l2 = o.decoupled ? 0 : o.weight_decay;
    const double c = 1 / o.bias_correction2_sqrt, step = o.lr / o.bias_correction1, b1 = o.beta1, b2 = o.beta2;
    using test::gamma_n;
    for (size_t i = 0; i < p.size(); ++i) {
      ep[i] = u * std::abs(decay * p[i]) + decay * ep[i];
      p[i] *= decay;
      const double g = g0[i] + l2 * p[i];
      const double eg = gamma_n(2, u) * (std::abs(g0[i]) + l2 * std::abs(p[i])) + l2 * ep[i];
      e1[i] = gamma_n(3, u) * (b1 * std::abs(s1[i]) + (1 - b1) * std::abs(g)) + b1 * e1[i] + (1 - b1) * eg;
      s1[i] = b1 * s1[i] + (1 - b1) * g;
      e2[i] = gamma_n(4, u) * (b2 * s2[i] + (1 - b2) * g * g) + b2 * e2[i] + 2 * (1 - b2) * std::abs(g) * eg;
      s2[i] = b2 * s2[i] + (1 - b2) * g * g;
      const double root = std::sqrt(s2[i]), den = root * c + o.eps;
      const double eden = gamma_n(3, u) * den + (root > 0 ? c * e2[i] / (2 * root) : c * std::sqrt(e2[i]));
      const double upd = step * s1[i] / den;
      const double eupd = std::abs(upd) * eden / den + step * e1[i] / den;
      ep[i] = gamma_n(3, u) * (std::abs(p[i]) + std::abs(upd)) + ep[i] + eupd;
      p[i] -= upd;
    }
  }
  // Two runs, each within e of exact arithmetic, are within 2 e of each other.
  static std::vector<double> twice(const std::vector<double>& e) {
    std::vector<double> t(e.size());
    for (size_t i = 0; i < e.size(); ++i) t[i] = 2 * e[i];
    return t;
  }
};

// Each param and state within twice its tracked rounding error (both backends).
template <class T>
void expect_state_within(const std::vector<Param<T>>& params, const std::vector<Tracker>& tracks, bool with_s1,
                         bool with_s2) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Param<T>& q = params[i];
    const Tracker& t = tracks[i];
    SCOPED_TRACE("tensor " + std::to_string(i) + " of " + std::to_string(q.layout.n) + " elements");
    EXPECT_TRUE(test::all_within(q.dp->host(), q.p.template to_vector<double>(), Tracker::twice(t.ep))) << "param";
    if (with_s1) {
      EXPECT_TRUE(test::all_within(q.ds1->host(), q.s1.template to_vector<double>(), Tracker::twice(t.e1)))
          << "state 1";
    }
    if (with_s2) {
      EXPECT_TRUE(test::all_within(q.ds2->host(), q.s2.template to_vector<double>(), Tracker::twice(t.e2)))
          << "state 2";
    }
  }
}


// `steps` SGD steps of every layout on both backends, then the params and buffers compared.
// capturable: the kernels read lr from device memory, written before each step, and it
// changes every step (lr / step).
template <class T>
void check_sgd(SgdStepOptions o, const std::vector<Layout>& layouts, int steps, bool capturable = false) {
  const double base_lr = o.lr;
  DeviceArray<double> lr_dev(1);
  auto params = make_params<T>(layouts, 1);
  std::vector<Tracker> tracks;
  for (const Param<T>& q : params) tracks.emplace_back(q.p.template to_vector<double>(), test::compute_roundoff<T>());
  for (int step = 0; step < steps; ++step) {
    const bool first = step == 0;
    if (capturable) o.lr = base_lr / (step + 1);
    lr_dev.upload({o.lr});
    auto g = make_grads(params, 1000 + 100 * step);
    const ops::SgdUpdate u{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov, first};
    std::vector<SgdTensor<T>> list;
    for (size_t i = 0; i < params.size(); ++i) {
      sgd_step_(params[i].p, g.cpu[i], params[i].s1, o, first);
      tracks[i].sgd(g.values[i], u);
      list.push_back({params[i].dp->data(), g.dev[i]->data(), params[i].ds1->data(), params[i].layout.n});
    }
    if (capturable)
      sgd_update_capturable<T>(list, {0, o.momentum, o.dampening, o.weight_decay, o.nesterov, first}, lr_dev.data(),
                               nullptr);
    else
      sgd_update<T>(list, u, nullptr);
  }
  expect_state_within(params, tracks, o.momentum != 0, false);
}

// The update core's adam_step_ builds from its options (core/ops_optim.cpp).
ops::AdamUpdate adam_update_of(const AdamStepOptions& o) {
  const double t = double(o.step);
  return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.decoupled_weight_decay, 1 - std::pow(o.beta1, t),
          std::sqrt(1 - std::pow(o.beta2, t))};
}

// capturable: as check_sgd's, with the step read from device memory too (the kernel
// computes the bias corrections from it).
template <class T>
void check_adam(AdamStepOptions o, const std::vector<Layout>& layouts, int steps, bool capturable = false) {
  const double base_lr = o.lr;
  DeviceArray<double> lr_dev(1), step_dev(1);
  auto params = make_params<T>(layouts, 7);
  std::vector<Tracker> tracks;
  for (const Param<T>& q : params) tracks.emplace_back(q.p.template to_vector<double>(), test::compute_roundoff<T>());
  for (int step = 1; step <= steps; ++step) {
    o.step = step;
    if (capturable) o.lr = base_lr / step;
    lr_dev.upload({o.lr});
    step_dev.upload({double(step)});
    auto g = make_grads(params, 2000 + 100 * step);
    std::vector<AdamTensor<T>> list;
    for (size_t i = 0; i < params.size(); ++i) {
      const Param<T>& q = params[i];
      adam_step_(q.p, g.cpu[i], q.s1, q.s2, o);
      tracks[i].adam(g.values[i], adam_update_of(o));
      list.push_back({q.dp->data(), g.dev[i]->data(), q.ds1->data(), q.ds2->data(), q.layout.n});
    }
    if (capturable) {
      ops::AdamUpdate u = adam_update_of(o);
      u.lr = u.bias_correction1 = u.bias_correction2_sqrt = 0;  // not used: the kernel computes them
      adam_update_capturable<T>(list, u, lr_dev.data(), step_dev.data(), nullptr);
    } else {
      adam_update<T>(list, adam_update_of(o), nullptr);
    }
  }
  expect_state_within(params, tracks, true, true);
}

const SgdStepOptions kSgdConfigs[] = {
    {.lr = 0.1},                                                                      // plain
    {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01},            // momentum, dampening, L2
    {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},            // Nesterov
};
const AdamStepOptions kAdamConfigs[] = {
    {.lr = 0.01},                                                                  // Adam
    {.lr = 0.01, .weight_decay = 0.05},                                            // Adam, L2 weight decay
    {.lr = 0.01, .beta1 = 0.8, .eps = 1e-6, .weight_decay = 0.1, .decoupled_weight_decay = true},  // AdamW
};

TEST(CudaOptim, SgdMatchesCpuOnAwkwardSizesAndAlignments) {
  EMBER_NEED_DEVICE();
  for (const SgdStepOptions& o : kSgdConfigs) {
    SCOPED_TRACE("momentum " + std::to_string(o.momentum) + (o.nesterov ? ", nesterov" : ""));
    check_sgd<float>(o, awkward_layouts(), 3);
  }
}

TEST(CudaOptim, AdamAndAdamWMatchCpuOnAwkwardSizesAndAlignments) {
  EMBER_NEED_DEVICE();
  for (const AdamStepOptions& o : kAdamConfigs) {
    SCOPED_TRACE(std::string(o.decoupled_weight_decay ? "AdamW" : "Adam") + ", weight decay " +
                 std::to_string(o.weight_decay));
    check_adam<float>(o, awkward_layouts(), 4);
  }
}

TEST(CudaOptim, Float64MatchesCpu) {
  EMBER_NEED_DEVICE();
  check_sgd<double>(kSgdConfigs[2], awkward_layouts(), 3);
  check_adam<double>(kAdamConfigs[2], awkward_layouts(), 3);
}

TEST(CudaOptim, CapturableLaunchesReadLrAndStepFromTheDevice) {
  EMBER_NEED_DEVICE();
  for (const SgdStepOptions& o : kSgdConfigs) check_sgd<float>(o, awkward_layouts(), 3, /*capturable=*/true);
  for (const AdamStepOptions& o : kAdamConfigs) check_adam<float>(o, awkward_layouts(), 4, /*capturable=*/true);
  check_adam<double>(kAdamConfigs[2], awkward_layouts(), 3, /*capturable=*/true);
}

TEST(CudaOptim, ListsLongerThanOneLaunchHoldsMatchCpu) {
  EMBER_NEED_DEVICE();
  // SGD with momentum holds 95 tensors a launch and Adam 79: 3 and 3 launches.
  const auto layouts = many_layouts(2 * TensorListMeta<3>::kMaxTensors + 7);
  static_assert(2 * TensorListMeta<3>::kMaxTensors + 7 > 2 * TensorListMeta<4>::kMaxTensors);
  check_sgd<float>(kSgdConfigs[1], layouts, 2);
  check_adam<float>(kAdamConfigs[2], layouts, 2);
}

// 16-bit parameters and gradients with float32 state: the reference is the same functor
// run in float on the host, the parameter rounded once per step as the kernel does. A
// fused multiply-add can move the float result across a 16-bit rounding boundary, so the
// parameters may differ by one 16-bit ulp (2^-7 relative for bf16 at the bottom of a
// binade, 2^-10 for f16); the states do not depend on the parameter here (no L2 term),
// so they get the float Tracker's bound.
// One 16-bit parameter list on the host (as float, the reference) and on the device.
template <class P>
struct Params16 {
  std::vector<std::vector<float>> p, s1, s2;  // reference values
  std::vector<std::unique_ptr<Guarded<P>>> dp;
  std::vector<std::unique_ptr<Guarded<float>>> ds1, ds2;

  Params16(const std::vector<Layout>& layouts, uint32_t seed) {
    for (const Layout& l : layouts) {
      const std::vector<P> v = from_doubles<P>(random_doubles(size_t(l.n), seed++));
      std::vector<float> f(v.size());
      for (size_t i = 0; i < v.size(); ++i) f[i] = float(test::to_double(v[i]));
      p.push_back(f);
      s1.emplace_back(v.size(), 0.0f);
      s2.emplace_back(v.size(), 0.0f);
      dp.push_back(std::make_unique<Guarded<P>>(v, l.offset[0]));
      ds1.push_back(std::make_unique<Guarded<float>>(s1.back(), l.offset[2]));
      ds2.push_back(std::make_unique<Guarded<float>>(s2.back(), l.offset[3]));
    }
  }
  // Params within one 16-bit ulp plus twice their tracked float error, states within
  // twice theirs (both sides run the float functor; see Tracker).
  void expect_within(double param_rtol, bool with_s2, const std::vector<Tracker>& tracks) const {
    const auto doubles = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
    for (size_t t = 0; t < p.size(); ++t) {
      SCOPED_TRACE("tensor " + std::to_string(t) + " of " + std::to_string(p[t].size()) + " elements");
      std::vector<double> ptol = Tracker::twice(tracks[t].ep);
      for (size_t i = 0; i < ptol.size(); ++i) ptol[i] += param_rtol * std::abs(double(p[t][i]));
      EXPECT_TRUE(test::all_within(dp[t]->host(), doubles(p[t]), ptol)) << "param";
      EXPECT_TRUE(test::all_within(ds1[t]->host(), doubles(s1[t]), Tracker::twice(tracks[t].e1))) << "state 1";
      if (with_s2) {
        EXPECT_TRUE(test::all_within(ds2[t]->host(), doubles(s2[t]), Tracker::twice(tracks[t].e2))) << "state 2";
      }
    }
  }
};

template <class P>
float round_to(float x) {
  return float(test::to_double(test::from_double<P>(x)));
}

// 16-bit parameters and gradients with float32 state: the reference is the same functor
// run in float on the host, the parameter rounded once per step as the kernel does. A
// fused multiply-add can move the float result across a 16-bit rounding boundary, so the
// parameters may differ by one 16-bit ulp (2^-7 relative for bf16 at the bottom of a
// binade, 2^-10 for f16); the states do not depend on the parameter here (AdamW, and SGD
// without weight decay), so they get the float Tracker's bound.
template <class P>
void check_16bit(double param_rtol) {
  const auto layouts = awkward_layouts();
  Params16<P> adam(layouts, 50), sgd(layouts, 60);
  std::vector<Tracker> adam_tracks, sgd_tracks;
  for (size_t t = 0; t < layouts.size(); ++t) {
    adam_tracks.emplace_back(std::vector<double>(adam.p[t].begin(), adam.p[t].end()), std::ldexp(1.0, -24));
    sgd_tracks.emplace_back(std::vector<double>(sgd.p[t].begin(), sgd.p[t].end()), std::ldexp(1.0, -24));
  }
  AdamStepOptions o = kAdamConfigs[2];  // AdamW
  for (int step = 1; step <= 3; ++step) {
    o.step = step;
    const ops::AdamUpdate au = adam_update_of(o);
    const auto prepared = au.prepare<float>();
    const ops::SgdUpdate su{0.05, 0.9, 0, 0, false, step == 1};
    std::vector<AdamTensor<P, float>> adam_list;
    std::vector<SgdTensor<P, float>> sgd_list;
    std::vector<std::unique_ptr<Guarded<P>>> dg;
    for (size_t t = 0; t < layouts.size(); ++t) {
      const std::vector<P> g = from_doubles<P>(random_doubles(size_t(layouts[t].n), 3000 + 100 * step + t));
      for (size_t i = 0; i < g.size(); ++i) {
        const float gf = float(test::to_double(g[i]));
        prepared(adam.p[t][i], gf, adam.s1[t][i], adam.s2[t][i]);
        adam.p[t][i] = round_to<P>(adam.p[t][i]);
        su(sgd.p[t][i], gf, sgd.s1[t][i]);
        sgd.p[t][i] = round_to<P>(sgd.p[t][i]);
      }
      std::vector<double> gd(g.size());
      for (size_t i = 0; i < g.size(); ++i) gd[i] = test::to_double(g[i]);
      adam_tracks[t].adam(gd, au);
      sgd_tracks[t].sgd(gd, su);
      dg.push_back(std::make_unique<Guarded<P>>(g, layouts[t].offset[1]));
      adam_list.push_back({adam.dp[t]->data(), dg[t]->data(), adam.ds1[t]->data(), adam.ds2[t]->data(), layouts[t].n});
      sgd_list.push_back({sgd.dp[t]->data(), dg[t]->data(), sgd.ds1[t]->data(), layouts[t].n});
    }
    adam_update<P, float>(adam_list, au, nullptr);
    sgd_update<P, float>(sgd_list, su, nullptr);
  }
  adam.expect_within(param_rtol, true, adam_tracks);
  sgd.expect_within(param_rtol, false, sgd_tracks);
}

TEST(CudaOptim, Bf16AndHalfParamsWithFloatStatesMatchTheFunctor) {
  EMBER_NEED_DEVICE();
  check_16bit<__nv_bfloat16>(1.0 / 128);
  check_16bit<__half>(1.0 / 1024);
}

TEST(CudaOptim, EmptyListsAndEmptyTensorsLaunchNothing) {
  EMBER_NEED_DEVICE();
  const ops::SgdUpdate su{0.1, 0.9, 0, 0, false, true};
  sgd_update<float>(std::span<const SgdTensor<float>>(), su, nullptr);
  const std::vector<SgdTensor<float>> empties(200, SgdTensor<float>{nullptr, nullptr, nullptr, 0});
  EXPECT_NO_THROW(sgd_update<float>(empties, su, nullptr));  // null pointers are fine with no elements
  const std::vector<AdamTensor<float>> adam_empties(3, AdamTensor<float>{nullptr, nullptr, nullptr, nullptr, 0});
  EXPECT_NO_THROW(adam_update<float>(adam_empties, adam_update_of({}), nullptr));
}

TEST(CudaOptim, BadArgumentsAreErrors) {
  EMBER_NEED_DEVICE();
  DeviceArray<float> p(8), g(8), b(8), m(8), v(8);
  const ops::SgdUpdate plain{0.1, 0, 0, 0, false, false}, momentum{0.1, 0.9, 0, 0, false, false};
  using S = SgdTensor<float>;
  EXPECT_THROW(sgd_update<float>(std::vector<S>{{p.data(), nullptr, b.data(), 8}}, plain, nullptr), Error);
  EXPECT_THROW(sgd_update<float>(std::vector<S>{{p.data(), g.data(), nullptr, 8}}, momentum, nullptr), Error);
  EXPECT_THROW(sgd_update<float>(std::vector<S>{{p.data(), g.data(), b.data(), -1}}, plain, nullptr), Error);
  EXPECT_NO_THROW(sgd_update<float>(std::vector<S>{{p.data(), g.data(), nullptr, 8}}, plain, nullptr));
  using A = AdamTensor<float>;
  const ops::AdamUpdate adam = adam_update_of({});
  EXPECT_THROW(adam_update<float>(std::vector<A>{{p.data(), g.data(), m.data(), nullptr, 8}}, adam, nullptr), Error);
  try {
    const std::vector<A> second_lacks_param{{p.data(), g.data(), m.data(), v.data(), 8},
                                            {nullptr, g.data(), m.data(), v.data(), 4}};
    adam_update<float>(second_lacks_param, adam, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adam_update: tensor 1 (4 elements) lacks a pointer"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ember::kernels::cuda
