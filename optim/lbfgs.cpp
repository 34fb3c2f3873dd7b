// L-BFGS (optim/lbfgs.h): a line-by-line port of PyTorch 1.13's lbfgs.py (step,
// _strong_wolfe, _cubic_interpolate). Python's min and max and C++'s std::min and
// std::max pick the same operand, NaN included, so the branches match too.
#include "optim/lbfgs.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <tuple>

#include "base/error.h"
#include "core/autograd.h"

namespace ember::optim {
namespace {

double dot(const Tensor& a, const Tensor& b) { return sum(mul(a, b)).item<double>(); }
double max_abs(const Tensor& a) { return max(abs(a)).item<double>(); }

// The minimiser of the cubic through (x1, f1, g1) and (x2, f2, g2), clamped to the bounds
// (default: between x1 and x2); their middle where the cubic has no minimum.
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                         const double* bounds = nullptr) {
  double lo = x1 <= x2 ? x1 : x2, hi = x1 <= x2 ? x2 : x1;
  if (bounds) lo = bounds[0], hi = bounds[1];
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2;
  if (d2_square >= 0) {
    const double d2 = std::sqrt(d2_square);
    const double min_pos = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                                    : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
    return std::min(std::max(min_pos, lo), hi);
  }
  return (lo + hi) / 2;
}

double loss_value(const Tensor& loss) {
  EMBER_CHECK(loss.defined() && loss.numel() == 1, "LBFGS::step: the closure must return the loss (one value), got ",
              loss.defined() ? shape_str(loss.shape()) : std::string("an undefined tensor"));
  return loss.item<double>();
}

}  // namespace

LBFGS::LBFGS(std::vector<Tensor> params, Options o)
    : Optimizer("LBFGS", std::vector<ParamGroup>{{std::move(params)}}, {{"lr", o.lr}}), o_(o) {
  if (o_.max_eval == 0) o_.max_eval = o_.max_iter * 5 / 4;
  EMBER_CHECK(o_.max_iter > 0 && o_.max_eval > 0 && o_.history_size > 0, "LBFGS: max_iter, max_eval and history_size ",
              "must be positive, got ", o_.max_iter, ", ", o_.max_eval, " and ", o_.history_size);
  EMBER_CHECK(o_.tolerance_grad >= 0 && o_.tolerance_change >= 0, "LBFGS: tolerances must be >= 0, got ",
              o_.tolerance_grad, " and ", o_.tolerance_change);
  for (size_t i = 1; i < params_.size(); ++i)
    EMBER_CHECK(params_[i].dtype() == params_[0].dtype() && params_[i].device() == params_[0].device(),
                "LBFGS: the parameters form one vector, so they need one dtype and device; parameter 0 is ",
                dtype_name(params_[0].dtype()), " on ", params_[0].device().str(), ", parameter ", i, " ",
                dtype_name(params_[i].dtype()), " on ", params_[i].device().str());
}

void LBFGS::update() {
  EMBER_FAIL("LBFGS::step: L-BFGS needs a closure that zeroes the gradients, recomputes the loss, calls backward "
             "and returns the loss: step(closure)");
}

Tensor LBFGS::flat_grad() const {
  std::vector<Tensor> views;
  for (const Tensor& p : params_) {
    const Tensor g = p.grad();
    views.push_back(g.defined() ? g.detach().to(p.dtype()).reshape({-1}) : zeros({p.numel()}, {p.dtype(), p.device()}));
  }
  return cat(views, 0);
}

void LBFGS::add_grad(double t, const Tensor& d) {
  int64_t offset = 0;
  for (const Tensor& p : params_) {
    p.detach().add_(mul(d.narrow(0, offset, p.numel()).view(p.shape()), Scalar(t)));
    offset += p.numel();
  }
}

void LBFGS::set_params(const std::vector<Tensor>& x) {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].detach().copy_(x[i]);
}

std::vector<Tensor> LBFGS::clone_params() const {
  std::vector<Tensor> out;
  for (const Tensor& p : params_) out.push_back(p.detach().clone());
  return out;
}

std::pair<double, Tensor> LBFGS::directional_evaluate(const LossClosure& closure, const std::vector<Tensor>& x, double t,
                                                      const Tensor& d) {
  add_grad(t, d);
  double loss = 0;
  {
    EnableGradGuard grad;
    loss = loss_value(closure());
  }
  Tensor g = flat_grad();
  set_params(x);
  return {loss, g};
}

LBFGS::Search LBFGS::strong_wolfe(const LossClosure& closure, const std::vector<Tensor>& x, double t, const Tensor& d,
                                  double f, const Tensor& g0, double gtd) {
  // lbfgs.py calls _strong_wolfe with its defaults, tolerance_change 1e-9 included.
  const double c1 = 1e-4, c2 = 0.9, tolerance_change = 1e-9;
  const int64_t max_ls = 25;
  const double d_norm = max_abs(d);
  const Tensor g = g0.clone();
  double f_new = 0;
  Tensor g_new;
  std::tie(f_new, g_new) = directional_evaluate(closure, x, t, d);
  int64_t evals = 1;
  double gtd_new = dot(g_new, d);

  // Bracket an interval containing a point satisfying the Wolfe criteria.
  double t_prev = 0, f_prev = f, gtd_prev = gtd;
  Tensor g_prev = g;
  bool done = false;
  int64_t ls_iter = 0;
  std::array<double, 2> bracket{}, bracket_f{}, bracket_gtd{};
  std::array<Tensor, 2> bracket_g;
  size_t n = 0;  // points in the bracket
  auto set_pair = [&] {
    bracket = {t_prev, t};
    bracket_f = {f_prev, f_new};
    bracket_g = {g_prev, g_new.clone()};
    bracket_gtd = {gtd_prev, gtd_new};
    n = 2;
  };
  while (ls_iter < max_ls) {
    if (f_new > (f + c1 * t * gtd) || (ls_iter > 1 && f_new >= f_prev)) {
      set_pair();
      break;
    }
    if (std::fabs(gtd_new) <= -c2 * gtd) {
      bracket[0] = t, bracket_f[0] = f_new, bracket_g[0] = g_new;
      n = 1;
      done = true;
      break;
    }
    if (gtd_new >= 0) {
      set_pair();
      break;
    }
    // interpolate
    const double bounds[2] = {t + 0.01 * (t - t_prev), t * 10};
    const double tmp = t;
    t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds);
    t_prev = tmp;
    f_prev = f_new;
    g_prev = g_new.clone();
    gtd_prev = gtd_new;
    std::tie(f_new, g_new) = directional_evaluate(closure, x, t, d);
    ++evals;
    gtd_new = dot(g_new, d);
    ++ls_iter;
  }
  if (ls_iter == max_ls) {
    bracket = {0, t};
    bracket_f = {f, f_new};
    bracket_g = {g, g_new};
    n = 2;
  }

  // Zoom: refine the bracket until a point satisfies the criteria.
  bool insuf_progress = false;
  size_t low = bracket_f[0] <= bracket_f[n - 1] ? 0 : 1, high = 1 - low;
  while (!done && ls_iter < max_ls) {
    if (std::fabs(bracket[1] - bracket[0]) * d_norm < tolerance_change) break;
    t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]);
    // Too close to an end, twice or past it: move to 0.1 of the bracket from the nearer end.
    const double bmax = std::max(bracket[0], bracket[1]), bmin = std::min(bracket[0], bracket[1]);
    const double eps = 0.1 * (bmax - bmin);
    if (std::min(bmax - t, t - bmin) < eps) {
      if (insuf_progress || t >= bmax || t <= bmin) {
        t = std::fabs(t - bmax) < std::fabs(t - bmin) ? bmax - eps : bmin + eps;
        insuf_progress = false;
      } else {
        insuf_progress = true;
      }
    } else {
      insuf_progress = false;
    }
    std::tie(f_new, g_new) = directional_evaluate(closure, x, t, d);
    ++evals;
    gtd_new = dot(g_new, d);
    ++ls_iter;
    if (f_new > (f + c1 * t * gtd) || f_new >= bracket_f[low]) {
      // Armijo condition not satisfied or not lower than the lowest point
      bracket[high] = t, bracket_f[high] = f_new, bracket_g[high] = g_new.clone(), bracket_gtd[high] = gtd_new;
      low = bracket_f[0] <= bracket_f[1] ? 0 : 1;
      high = 1 - low;
    } else {
      if (std::fabs(gtd_new) <= -c2 * gtd) {
        done = true;
      } else if (gtd_new * (bracket[high] - bracket[low]) >= 0) {  // the old high becomes the new low
        bracket[high] = bracket[low], bracket_f[high] = bracket_f[low];
        bracket_g[high] = bracket_g[low], bracket_gtd[high] = bracket_gtd[low];
      }
      bracket[low] = t, bracket_f[low] = f_new, bracket_g[low] = g_new.clone(), bracket_gtd[low] = gtd_new;
    }
  }
  return {bracket_f[low], bracket[low], bracket_g[low], evals};
}

Tensor LBFGS::step(const LossClosure& closure) {
  if (!closure) update();  // the error
  NoGradGuard no_grad;
  const double lr = group_lr(0);
  Tensor orig_loss;
  {
    EnableGradGuard grad;
    orig_loss = closure();
  }
  double loss = loss_value(orig_loss);
  int64_t current_evals = 1;
  ++func_evals_;
  count_step();
  Tensor flat = flat_grad();
  bool opt_cond = max_abs(flat) <= o_.tolerance_grad;
  if (opt_cond) return orig_loss;  // already optimal

  std::vector<double> al(static_cast<size_t>(o_.history_size));
  int64_t n_iter = 0;
  while (n_iter < o_.max_iter) {
    ++n_iter;
    ++n_iter_;
    // The descent direction.
    if (n_iter_ == 1) {
      d_ = neg(flat);
      old_dirs_.clear(), old_stps_.clear(), ro_.clear();
      h_diag_ = 1;
    } else {
      const Tensor y = sub(flat, prev_flat_grad_), s = mul(d_, Scalar(t_));
      const double ys = dot(y, s);  // y * s
      if (ys > 1e-10) {
        if (static_cast<int64_t>(old_dirs_.size()) == o_.history_size) {  // the memory is full: shift it
          old_dirs_.pop_front(), old_stps_.pop_front(), ro_.pop_front();
        }
        old_dirs_.push_back(y), old_stps_.push_back(s), ro_.push_back(1. / ys);
        h_diag_ = ys / dot(y, y);  // the initial Hessian approximation: (y * y)^-1 (y * s)
      }
      // The two-loop recursion: d = -H g.
      const size_t num_old = old_dirs_.size();
      Tensor q = neg(flat);
      for (size_t i = num_old; i-- > 0;) {
        al[i] = dot(old_stps_[i], q) * ro_[i];
        q = add(q, mul(old_dirs_[i], Scalar(-al[i])));
      }
      Tensor r = mul(q, Scalar(h_diag_));
      for (size_t i = 0; i < num_old; ++i) {
        const double be_i = dot(old_dirs_[i], r) * ro_[i];
        r = add(r, mul(old_stps_[i], Scalar(al[i] - be_i)));
      }
      d_ = r;
    }
    prev_flat_grad_ = flat.clone();
    prev_loss_ = loss;
    // The step length: the first iteration ever scales lr by min(1, 1 / |g|_1).
    t_ = n_iter_ == 1 ? std::min(1., 1. / sum(abs(flat)).item<double>()) * lr : lr;
    const double gtd = dot(flat, d_);  // the directional derivative
    if (gtd > -o_.tolerance_change) break;

    int64_t ls_func_evals = 0;
    if (o_.line_search == LineSearch::kStrongWolfe) {
      const Search s = strong_wolfe(closure, clone_params(), t_, d_, loss, flat, gtd);
      loss = s.f, flat = s.g, t_ = s.t, ls_func_evals = s.evals;
      add_grad(t_, d_);
      opt_cond = max_abs(flat) <= o_.tolerance_grad;
    } else {
      add_grad(t_, d_);  // a fixed step
      if (n_iter != o_.max_iter) {
        {
          EnableGradGuard grad;
          loss = loss_value(closure());
        }
        flat = flat_grad();
        opt_cond = max_abs(flat) <= o_.tolerance_grad;
        ls_func_evals = 1;
      }
    }
    current_evals += ls_func_evals;
    func_evals_ += ls_func_evals;

    if (n_iter == o_.max_iter || current_evals >= o_.max_eval || opt_cond) break;
    if (max_abs(mul(d_, Scalar(t_))) <= o_.tolerance_change) break;  // lack of progress
    if (std::fabs(loss - prev_loss_) < o_.tolerance_change) break;
  }
  return orig_loss;
}

NamedTensors LBFGS::state_dict() const {
  NamedTensors out = Optimizer::state_dict();
  const TensorOptions host(kFloat64, Device::cpu());
  out.emplace_back("lbfgs.func_evals", scalar_tensor(func_evals_, {kInt64, Device::cpu()}));
  out.emplace_back("lbfgs.n_iter", scalar_tensor(n_iter_, {kInt64, Device::cpu()}));
  if (!d_.defined()) return out;
  out.emplace_back("lbfgs.d", d_.detach());
  out.emplace_back("lbfgs.prev_flat_grad", prev_flat_grad_.detach());
  out.emplace_back("lbfgs.t", scalar_tensor(t_, host));
  out.emplace_back("lbfgs.H_diag", scalar_tensor(h_diag_, host));
  out.emplace_back("lbfgs.prev_loss", scalar_tensor(prev_loss_, host));
  const int64_t k = static_cast<int64_t>(ro_.size());
  out.emplace_back("lbfgs.ro", tensor(std::vector<double>(ro_.begin(), ro_.end()), {k}, host));
  if (k > 0) {
    out.emplace_back("lbfgs.old_dirs", stack(std::vector<Tensor>(old_dirs_.begin(), old_dirs_.end())));
    out.emplace_back("lbfgs.old_stps", stack(std::vector<Tensor>(old_stps_.begin(), old_stps_.end())));
  }
  return out;
}

void LBFGS::load_state_dict(const NamedTensors& state) {
  const char* op = "LBFGS::load_state_dict";
  NamedTensors base;
  std::map<std::string, Tensor> mine;
  for (const auto& [key, t] : state) {
    if (key.rfind("lbfgs.", 0) == 0)
      mine.emplace(key.substr(6), t);
    else
      base.emplace_back(key, t);
  }
  for (const auto& [key, t] : mine) {
    static const char* const kKnown[] = {"func_evals", "n_iter", "d", "prev_flat_grad", "t", "H_diag", "prev_loss",
                                         "ro", "old_dirs", "old_stps"};
    EMBER_CHECK(std::find(std::begin(kKnown), std::end(kKnown), key) != std::end(kKnown), op, ": unexpected key 'lbfgs.",
                key, "'");
  }
  for (const char* key : {"func_evals", "n_iter"})
    EMBER_CHECK(mine.count(key) && mine.at(key).numel() == 1 && mine.at(key).item<int64_t>() >= 0, op,
                ": the state needs 'lbfgs.", key, "', a whole number >= 0 (a state of another optimizer?)");
  int64_t n = 0;
  for (const Tensor& p : params_) n += p.numel();
  const TensorOptions like(params_[0].dtype(), params_[0].device());
  const bool searched = mine.count("d") > 0;
  Tensor d, prev, dirs, stps;
  std::vector<double> ro;
  if (searched) {
    for (const char* key : {"prev_flat_grad", "t", "H_diag", "prev_loss", "ro"})
      EMBER_CHECK(mine.count(key), op, ": the state has 'lbfgs.d' but no 'lbfgs.", key, "'");
    for (const char* key : {"d", "prev_flat_grad"})
      EMBER_CHECK(mine.at(key).shape() == Shape{n}, op, ": 'lbfgs.", key, "' has shape ",
                  shape_str(mine.at(key).shape()), " but the parameters have ", n, " elements");
    for (const char* key : {"t", "H_diag", "prev_loss"})
      EMBER_CHECK(mine.at(key).numel() == 1, op, ": 'lbfgs.", key, "' must hold one value");
    const int64_t k = mine.at("ro").numel();
    EMBER_CHECK(mine.at("ro").dim() == 1 && k <= o_.history_size, op, ": 'lbfgs.ro' holds ", k,
                " values, more than history_size ", o_.history_size);
    for (const char* key : {"old_dirs", "old_stps"}) {
      const Shape want = k > 0 ? Shape{k, n} : Shape{};
      EMBER_CHECK(k > 0 ? mine.count(key) && mine.at(key).shape() == want : !mine.count(key), op, ": 'lbfgs.", key,
                  "' must be ", k > 0 ? shape_str(want) : std::string("absent"), " with ", k, " history entries");
    }
    d = mine.at("d").to(like.dtype).to(like.device).contiguous().clone();
    prev = mine.at("prev_flat_grad").to(like.dtype).to(like.device).contiguous().clone();
    ro = mine.at("ro").to_vector<double>();
    if (k > 0) {
      dirs = mine.at("old_dirs").to(like.dtype).to(like.device).contiguous();
      stps = mine.at("old_stps").to(like.dtype).to(like.device).contiguous();
    }
  }
  Optimizer::load_state_dict(base);  // checks, then changes: nothing has changed if it throws
  func_evals_ = mine.at("func_evals").item<int64_t>();
  n_iter_ = mine.at("n_iter").item<int64_t>();
  d_ = d, prev_flat_grad_ = prev;
  old_dirs_.clear(), old_stps_.clear(), ro_.assign(ro.begin(), ro.end());
  if (searched) {
    t_ = mine.at("t").item<double>(), h_diag_ = mine.at("H_diag").item<double>();
    prev_loss_ = mine.at("prev_loss").item<double>();
    for (size_t i = 0; i < ro.size(); ++i) {
      old_dirs_.push_back(dirs.select(0, static_cast<int64_t>(i)).clone());
      old_stps_.push_back(stps.select(0, static_cast<int64_t>(i)).clone());
    }
  }
}

}  // namespace ember::optim
