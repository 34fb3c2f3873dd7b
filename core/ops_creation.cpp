// Creation ops: constant fills, ranges, identity, and the Philox random draws.
#include <cmath>

#include "core/dispatch.h"
#include "core/op_utils.h"

namespace ember {

Tensor full(const Shape& shape, Scalar value, TensorOptions options) {
  EMBER_OP_SITE("full");
  Tensor out = empty(shape, options);
  out.fill_(value);
  return out;
}
Tensor zeros(const Shape& shape, TensorOptions options) { return full(shape, 0, options); }
Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1, options); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), {t.dtype(), t.device()}); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), {t.dtype(), t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {t.dtype(), t.device()}); }

Tensor arange(int64_t end) { return arange(0, static_cast<double>(end), 1, kInt64); }

Tensor arange(double start, double end, double step, TensorOptions options) {
  EMBER_OP_SITE("arange");
  EMBER_CHECK(step != 0, "arange: step must be nonzero");
  EMBER_CHECK(std::isfinite(start) && std::isfinite(end), "arange: start ", start, " and end ", end, " must be finite");
  EMBER_CHECK((step > 0 && end >= start) || (step < 0 && end <= start), "arange: start ", start, ", end ", end,
              " and step ", step, " are inconsistent (the range would be negative)");
  const int64_t n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor out = empty({n}, options);
  if (n > 0) kernels::arange_stub(options.device, out, start, step);
  return out;
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  EMBER_OP_SITE("linspace");
  EMBER_CHECK(steps >= 0, "linspace: steps must be >= 0, got ", steps);
  Tensor out = empty({steps}, options);
  if (steps > 0) kernels::linspace_stub(options.device, out, start, end);
  return out;
}

Tensor eye(int64_t n, int64_t m, TensorOptions options) {
  EMBER_OP_SITE("eye");
  if (m < 0) m = n;
  EMBER_CHECK(n >= 0, "eye: n must be >= 0, got ", n);
  Tensor out = zeros({n, m}, options);
  if (n > 0 && m > 0) out.view({n * m}).slice(0, 0, n * m, m + 1).narrow(0, 0, std::min(n, m)).fill_(1);
  return out;
}

namespace {

// Reserves the Philox blocks a draw of `n` values needs (`per_block` values each).
kernels::PhiloxState reserve(Generator* gen, int64_t n, int64_t per_block) {
  Generator& g = gen ? *gen : default_generator();
  return {g.seed(), g.advance(static_cast<uint64_t>((n + per_block - 1) / per_block))};
}

}  // namespace

Tensor rand(const Shape& shape, TensorOptions options, Generator* gen) {
  EMBER_OP_SITE("rand");
  EMBER_CHECK(is_floating(options.dtype), "rand: expects a floating dtype, got ", dtype_name(options.dtype));
  Tensor out = empty(shape, options);
  auto st = reserve(gen, out.numel(), options.dtype == kFloat64 ? 2 : 4);
  if (out.numel() > 0) kernels::uniform_stub(options.device, out, st, 0.0, 1.0);
  return out;
}

Tensor randn(const Shape& shape, TensorOptions options, Generator* gen) {
  EMBER_OP_SITE("randn");
  EMBER_CHECK(is_floating(options.dtype), "randn: expects a floating dtype, got ", dtype_name(options.dtype));
  Tensor out = empty(shape, options);
  auto st = reserve(gen, out.numel(), options.dtype == kFloat64 ? 2 : 4);
  if (out.numel() > 0) kernels::normal_stub(options.device, out, st, 0.0, 1.0);
  return out;
}

Tensor rand_like(const Tensor& t, Generator* gen) {
  detail::check_defined("rand_like", t);
  return rand(t.shape(), {t.dtype(), t.device()}, gen);
}
Tensor randn_like(const Tensor& t, Generator* gen) {
  detail::check_defined("randn_like", t);
  return randn(t.shape(), {t.dtype(), t.device()}, gen);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions options, Generator* gen) {
  EMBER_OP_SITE("randint");
  EMBER_CHECK(low < high, "randint: low ", low, " must be less than high ", high);
  EMBER_CHECK(options.dtype != kBool, "randint: dtype bool is not supported");
  // The bounds travel to the kernels as doubles, exact up to 2^53.
  constexpr int64_t kExact = int64_t(1) << 53;
  EMBER_CHECK(low >= -kExact && high <= kExact, "randint: bounds [", low, ", ", high, ") must lie within +-2^53");
  Tensor out = empty(shape, options);
  const bool wide = static_cast<uint64_t>(high - low) > (uint64_t(1) << 32);
  auto st = reserve(gen, out.numel(), wide ? 2 : 4);
  if (out.numel() > 0) kernels::randint_stub(options.device, out, st, static_cast<double>(low), static_cast<double>(high));
  return out;
}

}  // namespace ember
