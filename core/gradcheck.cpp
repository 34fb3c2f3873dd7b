// gradcheck and gradgradcheck: analytic first and second derivatives against central
// finite differences in float64.
#include <cmath>

#include "base/error.h"
#include "core/autograd.h"
#include "core/ops.h"

namespace ember {

bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
               double eps, double atol, double rtol) {
  for (size_t i = 0; i < inputs.size(); ++i)
    EMBER_CHECK(inputs[i].dtype() == kFloat64 && inputs[i].is_leaf() && inputs[i].requires_grad(),
                "gradcheck: input ", i, " must be a float64 leaf that requires grad");
  Generator gen(12345);
  Tensor out = fn(inputs);
  Tensor w = randn(out.shape(), {kFloat64, out.device()}, &gen);
  for (const Tensor& t : inputs) t.set_grad({});
  sum(mul(out, w)).backward();

  NoGradGuard no_grad;
  auto objective = [&] { return sum(mul(fn(inputs), w)).item<double>(); };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    Tensor analytic = x.grad().defined() ? x.grad().contiguous() : zeros_like(x);
    Tensor flat = x.contiguous();
    EMBER_CHECK(flat.shares_storage_with(x), "gradcheck: input ", i, " must be contiguous");
    // Each element is set through fill_, never through a host pointer: the input may be
    // on a device.
    const std::vector<double> values = flat.to_vector<double>();
    const std::vector<double> a = analytic.to_vector<double>();
    const Tensor elements = flat.view({-1});
    for (int64_t k = 0; k < x.numel(); ++k) {
      const double saved = values[static_cast<size_t>(k)];
      const Tensor element = elements.narrow(0, k, 1);
      element.fill_(saved + eps);
      const double up = objective();
      element.fill_(saved - eps);
      const double down = objective();
      element.fill_(saved);
      const double numeric = (up - down) / (2 * eps);
      EMBER_CHECK(std::fabs(numeric - a[k]) <= atol + rtol * std::fabs(numeric), "gradcheck: input ", i,
                  " element ", k, ": analytic ", a[k], " vs numeric ", numeric);
    }
  }
  return true;
}

bool gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                   double eps, double atol, double rtol) {
  for (size_t i = 0; i < inputs.size(); ++i)
    EMBER_CHECK(inputs[i].dtype() == kFloat64 && inputs[i].is_leaf() && inputs[i].requires_grad(),
                "gradgradcheck: input ", i, " must be a float64 leaf that requires grad");
  const Tensor out = fn(inputs);
  // The output's gradient is an input of the first derivative too, as in PyTorch.
  Generator gen(54321);
  const Tensor v = randn(out.shape(), {kFloat64, out.device()}, &gen);
  v.requires_grad_();
  const size_t n = inputs.size();
  auto first_derivative = [&fn, n](const std::vector<Tensor>& xv) {
    // gradcheck's finite differences run this under NoGradGuard; it needs a graph.
    EnableGradGuard on;
    const std::vector<Tensor> xs(xv.begin(), xv.begin() + static_cast<std::ptrdiff_t>(n));
    const std::vector<Tensor> gs =
        autograd::grad({fn(xs)}, xs, {xv[n]}, /*retain_graph=*/true, /*create_graph=*/true, /*allow_unused=*/true);
    std::vector<Tensor> flat;
    for (size_t i = 0; i < n; ++i) flat.push_back((gs[i].defined() ? gs[i] : zeros_like(xs[i])).reshape({-1}));
    return cat(flat);
  };
  std::vector<Tensor> all = inputs;
  all.push_back(v);
  try {
    return gradcheck(first_derivative, all, eps, atol, rtol);
  } catch (const Error& e) {
    EMBER_FAIL("gradgradcheck: second derivatives (input ", n, " is the output's gradient): ", e.what());
  }
}

}  // namespace ember
