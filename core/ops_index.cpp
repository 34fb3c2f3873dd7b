// Joining and indexing: cat, stack, index_select, gather, scatter_add, one_hot.
#include "core/autograd_graph.h"
#include "core/dispatch.h"
#include "core/op_utils.h"

namespace ember {
namespace {

// Indices as contiguous int64, as the kernels expect.
Tensor as_index(const char* op, const Tensor& index) {
  detail::check_defined(op, index, "index");
  EMBER_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op, ": index must be int64 or int32, got ",
              dtype_name(index.dtype()));
  return index.to(kInt64).contiguous();
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_OP_SITE("cat");
  EMBER_CHECK(!tensors.empty(), "cat: expects at least one tensor");
  const Tensor& first = tensors[0];
  detail::check_defined("cat", first, "tensor 0");
  EMBER_CHECK(first.dim() > 0, "cat: tensor 0 is 0-dim and cannot be concatenated");
  const int64_t d = normalize_dim(dim, first.dim(), "cat");
  DType dtype = first.dtype();
  Shape shape = first.shape();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    detail::check_defined("cat", t, "a tensor in the list");
    detail::check_same_device("cat", {&first, &t});
    EMBER_CHECK(t.dim() == first.dim(), "cat: tensor ", i, " has shape ", shape_str(t.shape()), " but tensor 0 has ",
                shape_str(first.shape()), " (different number of dims)");
    for (int64_t k = 0; k < t.dim(); ++k)
      EMBER_CHECK(k == d || t.shape()[k] == first.shape()[k], "cat: tensor ", i, " has shape ", shape_str(t.shape()),
                  " but tensor 0 has ", shape_str(first.shape()), " (they must match except in dim ", d, ")");
    shape[d] += t.shape()[d];
    dtype = promote_types(dtype, t.dtype());
  }
  Tensor out = empty(shape, {dtype, first.device()});
  int64_t pos = 0;
  for (const Tensor& t : tensors) {
    out.narrow(d, pos, t.shape()[d]).copy_(t);
    pos += t.shape()[d];
  }
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) sizes.push_back(t.shape()[d]);
  return autograd::record("cat", tensors, out, [d, sizes](const Tensor& g) {
    std::vector<Tensor> grads;
    int64_t at = 0;
    for (int64_t n : sizes) {
      grads.push_back(g.narrow(d, at, n));
      at += n;
    }
    return grads;
  });
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_OP_SITE("stack");
  EMBER_CHECK(!tensors.empty(), "stack: expects at least one tensor");
  detail::check_defined("stack", tensors[0], "tensor 0");
  const int64_t d = normalize_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    detail::check_defined("stack", tensors[i], "a tensor in the list");
    EMBER_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: tensor ", i, " has shape ",
                shape_str(tensors[i].shape()), " but tensor 0 has ", shape_str(tensors[0].shape()));
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat(parts, d);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  EMBER_OP_SITE("index_select");
  detail::check_defined("index_select", x);
  detail::check_same_device("index_select", {&x, &index});
  EMBER_CHECK(index.defined() && index.dim() <= 1, "index_select: index must be 0-D or 1-D, got ",
              index.defined() ? shape_str(index.shape()) : std::string("undefined"));
  Tensor idx = as_index("index_select", index).reshape({-1});
  Tensor in = x.dim() == 0 ? x.reshape({1}) : x.contiguous();
  const int64_t d = normalize_dim(dim, in.dim(), "index_select");
  Shape shape = in.shape();
  shape[d] = idx.numel();
  Tensor out = empty(shape, {x.dtype(), x.device()});
  if (idx.numel() > 0) kernels::index_select_stub(x.device(), out, in, d, idx);
  out = x.dim() == 0 ? out.view({}) : out;
  // Rows picked more than once get the sum of their gradients: index_add, parallel over
  // the gradient's columns (Note [Deterministic index_add]), whose gradient is this op again.
  return autograd::record("index_select", {x, index}, out, [in_shape = in.shape(), x_shape = x.shape(), d, idx](const Tensor& g) {
    Tensor gg = g.reshape([&] { Shape s = in_shape; s[d] = idx.numel(); return s; }());
    Tensor gi = index_add(zeros(in_shape, {g.dtype(), g.device()}), d, idx, gg);
    return std::vector<Tensor>{gi.reshape(x_shape), Tensor()};
  });
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  EMBER_OP_SITE("gather");
  detail::check_defined("gather", x);
  detail::check_same_device("gather", {&x, &index});
  Tensor idx = as_index("gather", index);
  EMBER_CHECK(idx.dim() == x.dim(), "gather: index has ", idx.dim(), " dims but the input has ", x.dim(),
              " (index ", shape_str(idx.shape()), ", input ", shape_str(x.shape()), ")");
  const int64_t d = normalize_dim(dim, std::max<int64_t>(x.dim(), 1), "gather");
  for (int64_t k = 0; k < x.dim(); ++k)
    EMBER_CHECK(k == d || idx.shape()[k] <= x.shape()[k], "gather: index ", shape_str(idx.shape()),
                " is larger than the input ", shape_str(x.shape()), " in dim ", k);
  Tensor out = empty(idx.shape(), {x.dtype(), x.device()});
  if (out.numel() > 0) kernels::gather_stub(x.device(), out, x, d, idx);
  return autograd::record("gather", {x, index}, out, [x_shape = x.shape(), d, idx](const Tensor& g) {
    return std::vector<Tensor>{scatter_add(zeros(x_shape, {g.dtype(), g.device()}), d, idx, g), Tensor()};
  });
}

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  EMBER_OP_SITE("scatter_add");
  detail::check_defined("scatter_add", self, "self");
  detail::check_defined("scatter_add", src, "src");
  detail::check_same_device("scatter_add", {&self, &index, &src});
  Tensor idx = as_index("scatter_add", index);
  EMBER_CHECK(idx.dim() == self.dim() && src.dim() == self.dim(), "scatter_add: self ", shape_str(self.shape()),
              ", index ", shape_str(idx.shape()), " and src ", shape_str(src.shape()), " must have the same number of dims");
  const int64_t d = normalize_dim(dim, std::max<int64_t>(self.dim(), 1), "scatter_add");
  for (int64_t k = 0; k < self.dim(); ++k) {
    EMBER_CHECK(idx.shape()[k] <= src.shape()[k], "scatter_add: index ", shape_str(idx.shape()),
                " is larger than src ", shape_str(src.shape()), " in dim ", k);
    EMBER_CHECK(k == d || idx.shape()[k] <= self.shape()[k], "scatter_add: index ", shape_str(idx.shape()),
                " is larger than self ", shape_str(self.shape()), " in dim ", k);
  }
  Tensor out = self.clone();
  if (idx.numel() > 0) kernels::scatter_add_stub(self.device(), out, d, idx, src.to(self.dtype()));
  // src's gradient is g read back at the scattered positions; src may be larger than index.
  return autograd::record("scatter_add", {self, index, src}, out, [d, idx, src_shape = src.shape()](const Tensor& g) {
    Tensor gs = gather(g, d, idx);
    // Zeros where src reaches past index, joined with cat so that it differentiates again.
    for (int64_t k = 0; k < gs.dim(); ++k) {
      if (gs.size(k) == src_shape[k]) continue;
      Shape pad = gs.shape();
      pad[k] = src_shape[k] - gs.size(k);
      gs = cat({gs, zeros(pad, {g.dtype(), g.device()})}, k);
    }
    return std::vector<Tensor>{g, Tensor(), gs};
  });
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  EMBER_OP_SITE("one_hot");
  detail::check_defined("one_hot", indices, "indices");
  EMBER_CHECK(indices.dtype() == kInt64 || indices.dtype() == kInt32, "one_hot: indices must be int64 or int32, got ",
              dtype_name(indices.dtype()));
  if (indices.numel() > 0 && !(indices.device().is_meta() && num_classes >= 0)) {  // meta: no values to check
    const int64_t lo = min(indices).item<int64_t>(), hi = max(indices).item<int64_t>();
    EMBER_CHECK(lo >= 0, "one_hot: index ", lo, " is negative");
    if (num_classes < 0) num_classes = hi + 1;
    EMBER_CHECK(hi < num_classes, "one_hot: index ", hi, " is out of range for ", num_classes, " classes");
  }
  EMBER_CHECK(num_classes >= 0, "one_hot: num_classes cannot be inferred from an empty tensor; pass it");
  Tensor classes = arange(0, static_cast<double>(num_classes), 1, {kInt64, indices.device()});
  return eq(indices.to(kInt64).unsqueeze(-1), classes).to(kInt64);
}

}  // namespace ember
