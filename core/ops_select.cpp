// Ops that pick parts of a tensor: topk, split and chunk (views), unfold's free form,
// tril / triu, and index_add (index_select's backward).
#include <algorithm>

#include "core/autograd_graph.h"
#include "core/dispatch.h"
#include "core/op_utils.h"

namespace ember {
namespace {

// [outer, size, inner] of shape s around dim d.
Shape around(const Shape& s, int64_t d) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= s[i];
  for (size_t i = d + 1; i < s.size(); ++i) inner *= s[i];
  return {outer, s[d], inner};
}

// x where the column minus the row of its last two dims satisfies keep(col - row).
template <class Keep>
Tensor triangle(const char* op, const Tensor& x, const Keep& keep) {
  EMBER_OP_SITE(op);
  detail::check_defined(op, x);
  EMBER_CHECK(x.dim() >= 2, op, ": expects a tensor of at least 2 dims, got ", shape_str(x.shape()));
  const int64_t rows = x.size(-2), cols = x.size(-1);
  Tensor r = arange(0, static_cast<double>(rows), 1, {kInt64, x.device()}).unsqueeze(1);
  Tensor c = arange(0, static_cast<double>(cols), 1, {kInt64, x.device()}).unsqueeze(0);
  return where(keep(sub(c, r)), x, zeros({}, {x.dtype(), x.device()}));
}

}  // namespace

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted*/) {
  EMBER_OP_SITE("topk");
  detail::check_defined("topk", x);
  EMBER_CHECK(x.dtype() != kBool, "topk: bool tensors are not supported");
  Tensor in = x.dim() == 0 ? x.reshape({1}) : x.contiguous();
  const int64_t d = normalize_dim(dim, in.dim(), "topk");
  const int64_t n = in.shape()[d];
  EMBER_CHECK(k >= 0 && k <= n, "topk: k = ", k, " is out of range for dim ", d, " of size ", n, " (shape ",
              shape_str(x.shape()), ")");
  Shape shape = in.shape();
  shape[d] = k;
  Tensor values = empty(shape, {x.dtype(), x.device()});
  Tensor indices = empty(shape, {kInt64, x.device()});
  if (values.numel() > 0) {
    const Shape a = around(in.shape(), d);
    kernels::topk_stub(x.device(), values.view({a[0], k, a[2]}), indices.view({a[0], k, a[2]}), in.view(a), k,
                       largest);
  }
  Tensor idx = indices;
  if (x.dim() == 0) {
    values = values.view({});
    indices = indices.view({});
  }
  // The gradient goes back to the picked elements (distinct within a row) with
  // scatter_add, whose own gradient is gather: differentiable again.
  Tensor v = autograd::record("topk", {x}, values, [x_shape = x.shape(), in_shape = in.shape(), shape, d, idx](const Tensor& g) {
    Tensor gi = scatter_add(zeros(in_shape, {g.dtype(), g.device()}), d, idx, g.reshape(shape));
    return std::vector<Tensor>{gi.reshape(x_shape)};
  });
  return {v, indices};
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& split_sizes, int64_t dim) {
  detail::check_defined("split", x);
  EMBER_CHECK(x.dim() > 0, "split: cannot split a 0-dim tensor");
  const int64_t d = normalize_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : split_sizes) {
    EMBER_CHECK(s >= 0, "split: sizes must be >= 0, got ", s);
    total += s;
  }
  EMBER_CHECK(total == x.shape()[d], "split: sizes sum to ", total, " but dim ", d, " of ", shape_str(x.shape()),
              " has size ", x.shape()[d]);
  std::vector<Tensor> parts;
  int64_t at = 0;
  for (int64_t s : split_sizes) {
    parts.push_back(x.narrow(d, at, s));
    at += s;
  }
  return parts;
}

// As torch.split: pieces of split_size, the last one smaller when it does not divide the
// size (one empty piece for an empty dim).
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  detail::check_defined("split", x);
  EMBER_CHECK(x.dim() > 0, "split: cannot split a 0-dim tensor");
  const int64_t n = x.shape()[normalize_dim(dim, x.dim(), "split")];
  EMBER_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: split_size must be positive, got ", split_size);
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += split_size) sizes.push_back(std::min(split_size, n - at));
  if (n == 0) sizes.push_back(0);
  return split(x, sizes, dim);
}

// As torch.chunk: pieces of ceil(n / chunks), so there may be fewer than `chunks`.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  detail::check_defined("chunk", x);
  EMBER_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  EMBER_CHECK(x.dim() > 0, "chunk: cannot chunk a 0-dim tensor");
  const int64_t n = x.shape()[normalize_dim(dim, x.dim(), "chunk")];
  const int64_t size = (n + chunks - 1) / chunks;
  if (n == 0) return split(x, std::vector<int64_t>(chunks, 0), dim);
  return split(x, size, dim);
}

Tensor unfold(const Tensor& x, int64_t dim, int64_t size, int64_t step) {
  detail::check_defined("unfold", x);
  return x.unfold(dim, size, step);
}

Tensor tril(const Tensor& x, int64_t diagonal) {
  return triangle("tril", x, [diagonal](const Tensor& c_minus_r) { return le(c_minus_r, Scalar(diagonal)); });
}
Tensor triu(const Tensor& x, int64_t diagonal) {
  return triangle("triu", x, [diagonal](const Tensor& c_minus_r) { return ge(c_minus_r, Scalar(diagonal)); });
}

Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  EMBER_OP_SITE("index_add");
  detail::check_defined("index_add", self, "self");
  detail::check_defined("index_add", source, "source");
  detail::check_defined("index_add", index, "index");
  detail::check_same_device("index_add", {&self, &index, &source});
  EMBER_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, "index_add: index must be int64 or int32, got ",
              dtype_name(index.dtype()));
  EMBER_CHECK(index.dim() <= 1, "index_add: index must be 0-D or 1-D, got ", shape_str(index.shape()));
  EMBER_CHECK(self.dtype() != kBool, "index_add: bool tensors are not supported");
  Tensor idx = index.to(kInt64).contiguous().reshape({-1});
  const Shape s = self.dim() == 0 ? Shape{1} : self.shape();
  const int64_t d = normalize_dim(dim, static_cast<int64_t>(s.size()), "index_add");
  Shape expected = s;
  expected[d] = idx.numel();
  const Shape src_shape = source.dim() == 0 ? Shape{1} : source.shape();
  EMBER_CHECK(src_shape == expected, "index_add: source ", shape_str(source.shape()), " must have shape ",
              shape_str(expected), " (self ", shape_str(self.shape()), " with dim ", d, " of the index's length ",
              idx.numel(), ")");
  Tensor out = self.contiguous().clone().reshape(s);
  if (idx.numel() > 0 && out.numel() > 0) {
    const Shape a = around(s, d);
    kernels::index_add_stub(self.device(), out.view(a), d, idx,
                            source.to(self.dtype()).contiguous().reshape({a[0], idx.numel(), a[2]}));
  }
  out = out.reshape(self.shape());
  return autograd::record("index_add", {self, index, source}, out, [d, idx, src = source.shape(), s](const Tensor& g) {
    return std::vector<Tensor>{g, Tensor(), index_select(g.reshape(s), d, idx).reshape(src)};
  });
}

}  // namespace ember
