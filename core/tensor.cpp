// Tensor metadata, views and element access. Copies and fills dispatch to the backends
// through the copy/fill stubs; everything else here only rearranges shape and strides.
// The in-place arithmetic (add_, sub_, mul_, div_) is in core/tensor_inplace.cpp.
#include "core/tensor.h"

#include <algorithm>
#include <cstring>
#include <ostream>

#include "base/error.h"
#include "core/autograd.h"
#include "core/autograd_graph.h"
#include "core/cuda_graph.h"
#include "core/device_runtime.h"
#include "core/dispatch.h"
#include "core/meta.h"
#include "core/op_utils.h"
#include "core/ops.h"
#include "core/runtime.h"
#include "core/storage.h"
#include "core/stream.h"
#include "memory/site.h"

namespace ember {
namespace {

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl().storage;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

using Grads = std::vector<Tensor>;

// A view's gradient for ops that only rearrange (view, reshape, squeeze, unsqueeze).
Tensor record_reshape(const char* name, const Tensor& base, const Tensor& v) {
  return autograd::record(name, {base}, v, [shape = base.shape()](const Tensor& g) { return Grads{g.reshape(shape)}; });
}

// A view that picks part of its base: the gradient is g placed in zeros of the base's
// shape, through the same view; that placement is recorded as an op of its own
// (`backward_name`), whose gradient is the view again, so views differentiate twice.
template <class ViewFn>
Tensor record_part(const char* name, const char* backward_name, const Tensor& base, const Tensor& v, ViewFn view_fn) {
  return autograd::record(name, {base}, v, [shape = base.shape(), view_fn, backward_name](const Tensor& g) {
    Tensor z = zeros(shape, {g.dtype(), g.device()});
    view_fn(z).copy_(g.detach());
    return Grads{autograd::record(backward_name, {g}, z, [view_fn](const Tensor& gz) { return Grads{view_fn(gz)}; })};
  });
}

// Resolves one -1 in `shape` against numel; throws naming `op`.
Shape infer_shape(const Shape& shape, int64_t numel, const Shape& from, const char* op) {
  Shape out = shape;
  int infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      EMBER_CHECK(infer < 0, op, ": only one dim can be -1 in ", shape_str(shape));
      infer = static_cast<int>(i);
      out[i] = 1;  // until inferred: check_shape bounds the product of the others
    }
  }
  check_shape(out, op);
  const int64_t known = shape_numel(out);
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape), " is invalid for ",
                shape_str(from), " (", numel, " elements)");
    out[infer] = numel / known;
  }
  EMBER_CHECK(shape_numel(out) == numel, op, ": shape ", shape_str(shape), " is invalid for ",
              shape_str(from), " (", numel, " elements)");
  return out;
}

// Strides for viewing (shape, strides) as new_shape without a copy, or false when the
// memory layout does not allow it (the rule of PyTorch's computeStride).
bool view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape, Shape& out) {
  out.assign(new_shape.size(), 0);
  if (shape_numel(shape) == 0 || shape.empty()) {
    out = contiguous_strides(new_shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

}  // namespace

const TensorImpl& Tensor::impl() const {
  EMBER_CHECK(impl_ != nullptr, "Tensor: this tensor is undefined (default-constructed)");
  return *impl_;
}

Device Tensor::device() const { return impl().storage->device(); }

int64_t Tensor::size(int64_t d) const { return shape()[normalize_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[normalize_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    if (shape()[d] == 1) continue;
    if (strides()[d] != expected) return shape_numel(shape()) == 0;
    expected *= shape()[d];
  }
  return true;
}

bool Tensor::shares_storage_with(const Tensor& other) const {
  return defined() && other.defined() && impl().storage == other.impl().storage;
}

void* Tensor::data_ptr() const {
  detail::check_has_data(!impl().storage->device().is_meta(), "data_ptr");
  return static_cast<char*>(impl().storage->data()) + offset() * element_size();
}

template <class T>
T* Tensor::data() const {
  EMBER_CHECK(dtype() == dtype_of<std::remove_const_t<T>>(), "Tensor::data: the tensor is ",
              dtype_name(dtype()), ", not ", dtype_name(dtype_of<std::remove_const_t<T>>()));
  return static_cast<T*>(data_ptr());
}
#define EMBER_INSTANTIATE_DATA(T) template T* Tensor::data<T>() const; template const T* Tensor::data<const T>() const;
EMBER_INSTANTIATE_DATA(bool)
EMBER_INSTANTIATE_DATA(uint8_t)
EMBER_INSTANTIATE_DATA(int32_t)
EMBER_INSTANTIATE_DATA(int64_t)
EMBER_INSTANTIATE_DATA(Half)
EMBER_INSTANTIATE_DATA(BFloat16)
EMBER_INSTANTIATE_DATA(float)
EMBER_INSTANTIATE_DATA(double)
#undef EMBER_INSTANTIATE_DATA

// ----- views -----

Tensor Tensor::view(const Shape& new_shape) const {
  Shape target = infer_shape(new_shape, numel(), shape(), "view");
  Shape st;
  EMBER_CHECK(view_strides(shape(), strides(), target, st), "view: cannot view ", shape_str(shape()),
              " with strides ", shape_str(strides()), " as ", shape_str(target),
              " without a copy (use reshape)");
  return record_reshape("view", *this, make_view(*this, std::move(target), std::move(st), offset()));
}

Tensor Tensor::reshape(const Shape& new_shape) const {
  Shape target = infer_shape(new_shape, numel(), shape(), "reshape");
  Shape st;
  if (view_strides(shape(), strides(), target, st))
    return record_reshape("reshape", *this, make_view(*this, std::move(target), std::move(st), offset()));
  return contiguous().view(target);
}

Tensor Tensor::permute(const Shape& dims) const {
  EMBER_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: ", shape_str(dims),
              " has ", dims.size(), " dims but the tensor has ", dim());
  Shape sh(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = normalize_dim(dims[i], dim(), "permute");
    EMBER_CHECK(!seen[d], "permute: dim ", dims[i], " appears twice in ", shape_str(dims));
    seen[d] = true;
    sh[i] = shape()[d];
    st[i] = strides()[d];
  }
  Shape inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[normalize_dim(dims[i], dim(), "permute")] = static_cast<int64_t>(i);
  return autograd::record("permute", {*this}, make_view(*this, std::move(sh), std::move(st), offset()),
                          [inverse](const Tensor& g) { return Grads{g.permute(inverse)}; });
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0) return *this;
  d0 = normalize_dim(d0, dim(), "transpose");
  d1 = normalize_dim(d1, dim(), "transpose");
  Shape sh = shape(), st = strides();
  std::swap(sh[d0], sh[d1]);
  std::swap(st[d0], st[d1]);
  return autograd::record("transpose", {*this}, make_view(*this, std::move(sh), std::move(st), offset()),
                          [d0, d1](const Tensor& g) { return Grads{g.transpose(d0, d1)}; });
}

Tensor Tensor::t() const {
  EMBER_CHECK(dim() <= 2, "t: expects a tensor of at most 2 dims, got ", shape_str(shape()));
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  EMBER_CHECK(dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  d = normalize_dim(d, dim(), "narrow");
  int64_t n = shape()[d];
  if (start < 0) start += n;
  EMBER_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: start ", start, " and length ",
              length, " are out of range for dim ", d, " of size ", n);
  Shape sh = shape();
  sh[d] = length;
  return record_part("narrow", "narrow_backward", *this,
                     make_view(*this, std::move(sh), strides(), offset() + start * strides()[d]),
                     [d, start, length](const Tensor& z) { return z.narrow(d, start, length); });
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  EMBER_CHECK(dim() > 0, "slice: cannot slice a 0-dim tensor");
  d = normalize_dim(d, dim(), "slice");
  EMBER_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sh = shape(), st = strides();
  sh[d] = (end - start + step - 1) / step;
  st[d] *= step;
  return record_part("slice", "slice_backward", *this,
                     make_view(*this, std::move(sh), std::move(st), offset() + start * strides()[d]),
                     [d, start, end, step](const Tensor& z) { return z.slice(d, start, end, step); });
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  EMBER_CHECK(dim() > 0, "select: cannot select from a 0-dim tensor");
  d = normalize_dim(d, dim(), "select");
  int64_t n = shape()[d];
  EMBER_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", d, " of size ", n);
  if (index < 0) index += n;
  Shape sh = shape(), st = strides();
  int64_t off = offset() + index * st[d];
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  return record_part("select", "select_backward", *this, make_view(*this, std::move(sh), std::move(st), off),
                     [d, index](const Tensor& z) { return z.select(d, index); });
}

Tensor Tensor::expand(const Shape& target) const {
  EMBER_CHECK(target.size() >= shape().size(), "expand: cannot expand ", shape_str(shape()), " to ",
              shape_str(target), " (fewer dims)");
  size_t lead = target.size() - shape().size();
  Shape sh(target.size()), st(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    if (i < lead) {
      EMBER_CHECK(target[i] >= 0, "expand: new leading size ", target[i], " in ", shape_str(target), " must be >= 0");
      sh[i] = target[i];
      st[i] = 0;
      continue;
    }
    int64_t have = shape()[i - lead];
    int64_t want = target[i] == -1 ? have : target[i];
    EMBER_CHECK(have == want || have == 1, "expand: cannot expand ", shape_str(shape()), " to ",
                shape_str(target), " (dim ", i, ": ", have, " to ", want, ")");
    sh[i] = want;
    st[i] = have == want ? strides()[i - lead] : 0;
  }
  check_shape(sh, "expand");
  // The node sums the broadcast gradient back to this shape.
  return autograd::record("expand", {*this}, make_view(*this, std::move(sh), std::move(st), offset()),
                          [](const Tensor& g) { return Grads{g}; });
}

Tensor Tensor::squeeze() const {
  Shape sh, st;
  for (int64_t d = 0; d < dim(); ++d)
    if (shape()[d] != 1) {
      sh.push_back(shape()[d]);
      st.push_back(strides()[d]);
    }
  return record_reshape("squeeze", *this, make_view(*this, std::move(sh), std::move(st), offset()));
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = normalize_dim(d, dim(), "squeeze");
  if (shape()[d] != 1) return *this;
  Shape sh = shape(), st = strides();
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  return record_reshape("squeeze", *this, make_view(*this, std::move(sh), std::move(st), offset()));
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = normalize_dim(d, dim() + 1, "unsqueeze");
  Shape sh = shape(), st = strides();
  int64_t s = d < dim() ? shape()[d] * strides()[d] : 1;
  sh.insert(sh.begin() + d, 1);
  st.insert(st.begin() + d, s);
  return record_reshape("unsqueeze", *this, make_view(*this, std::move(sh), std::move(st), offset()));
}

// unfold's backward: g [..., windows, ..., size] added back into zeros of the base's shape,
// one strided slice per offset in the window (windows overlap when step < size). It is
// linear in g, and its gradient is unfold again, so unfold differentiates twice.
static Tensor unfold_backward(const Tensor& g, const Shape& shape, int64_t d, int64_t size, int64_t step) {
  Tensor z = zeros(shape, {g.dtype(), g.device()});
  const int64_t windows = g.shape()[d];
  if (windows > 0) {
    const Tensor gd = g.detach();
    for (int64_t i = 0; i < size; ++i) z.slice(d, i, i + (windows - 1) * step + 1, step).add_(gd.select(-1, i));
  }
  return autograd::record("unfold_backward", {g}, z, [d, size, step](const Tensor& gz) {
    return Grads{gz.unfold(d, size, step)};
  });
}

Tensor Tensor::unfold(int64_t d, int64_t size, int64_t step) const {
  EMBER_CHECK(dim() > 0, "unfold: cannot unfold a 0-dim tensor");
  d = normalize_dim(d, dim(), "unfold");
  const int64_t n = shape()[d];
  EMBER_CHECK(step > 0, "unfold: step must be positive, got ", step);
  EMBER_CHECK(size >= 0 && size <= n, "unfold: size ", size, " is out of range for dim ", d, " of size ", n);
  Shape sh = shape(), st = strides();
  sh[d] = (n - size) / step + 1;
  st[d] *= step;
  sh.push_back(size);
  st.push_back(strides()[d]);
  return autograd::record("unfold", {*this}, make_view(*this, std::move(sh), std::move(st), offset()),
                          [shape = shape(), d, size, step](const Tensor& g) {
                            return Grads{unfold_backward(g, shape, d, size, step)};
                          });
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = normalize_dim(start, dim(), "flatten");
  end = normalize_dim(end, dim(), "flatten");
  EMBER_CHECK(start <= end, "flatten: start_dim ", start, " is after end_dim ", end);
  Shape sh(shape().begin(), shape().begin() + start);
  int64_t n = 1;
  for (int64_t d = start; d <= end; ++d) n *= shape()[d];
  sh.push_back(n);
  sh.insert(sh.end(), shape().begin() + end + 1, shape().end());
  return reshape(sh);
}

// ----- copies -----

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  EMBER_OP_SITE("clone");
  Tensor out = empty(shape(), {dtype(), device()});
  if (numel() > 0) kernels::copy_stub(device(), out, *this);
  return autograd::record("clone", {*this}, out, [](const Tensor& g) { return Grads{g}; });
}

Tensor Tensor::to(DType t) const {
  EMBER_OP_SITE("to");
  if (t == dtype()) return *this;
  Tensor out = empty(shape(), {t, device()});
  if (numel() > 0) kernels::copy_stub(device(), out, *this);
  // The node converts the gradient back to this tensor's dtype.
  return autograd::record("to", {*this}, out, [](const Tensor& g) { return Grads{g}; });
}

Tensor Tensor::to(Device d, bool non_blocking) const {
  EMBER_OP_SITE("to");
  if (d == device()) return *this;
  EMBER_CHECK(!device().is_meta(), "to: cannot copy a tensor to ", d.str(), ": it has no data: it is on the meta device");
  const Tensor src = d.is_meta() ? Tensor() : detach().contiguous();  // to meta, the data is dropped
  Tensor out = empty(shape(), {dtype(), d});
  // Only a non-blocking copy from pinned memory is left to the stream; the rest waits.
  if (!(d.is_cuda() && non_blocking && src.is_pinned()))
    for (Device side : {device(), d}) detail::check_not_capturing(Stream::current(side), "to");
  if (!d.is_meta()) {
    kernels::cuda_copy(out.data_ptr(), d, src.data_ptr(), device(), static_cast<size_t>(numel() * element_size()),
                       non_blocking);
    // A non-blocking copy reads its source later: keep the source's memory from reuse
    // until the copy's stream is done (the pinned and the device allocators honour it).
    // Between two CUDA devices the copy orders the source's stream after itself instead,
    // and pageable host memory is read before the copy returns (CUDA stages it).
    const bool source_read_later = device().is_cuda() ? !d.is_cuda() : src.is_pinned();
    if (non_blocking && source_read_later) {
      const Device cuda_side = d.is_cuda() ? d : device();
      src.record_stream(Stream::current(cuda_side));
    }
  }
  const Device back = device();
  return autograd::record("to", {*this}, out, [back](const Tensor& g) { return Grads{g.to(back)}; });
}

Tensor Tensor::pin_memory() const {
  detail::check_has_data(!device().is_meta(), "pin_memory");
  EMBER_CHECK(device().is_cpu(), "pin_memory: the tensor is on ", device().str(), "; only CPU tensors are pinned");
  if (is_pinned()) return *this;
  const Tensor src = contiguous();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(numel() * element_size()), Device::cpu(), true);
  impl->shape = shape();
  impl->strides = contiguous_strides(shape());
  impl->offset = 0;
  impl->dtype = dtype();
  Tensor out(std::move(impl));
  if (numel() > 0) std::memcpy(out.data_ptr(), src.data_ptr(), static_cast<size_t>(numel() * element_size()));
  return out;
}

bool Tensor::is_pinned() const { return impl().storage->pinned(); }

void Tensor::record_stream(const Stream& stream) const {
  EMBER_CHECK(stream.device() == device() || (is_pinned() && stream.device().is_cuda()), "record_stream: the tensor is on ",
              device().str(), ", the stream on ", stream.device().str());
  impl().storage->record_stream(stream.id());
}

const Tensor& Tensor::copy_(const Tensor& src) const {
  EMBER_CHECK(src.device() == device(), "copy_: source is on ", src.device().str(), " but destination on ",
              device().str());
  EMBER_CHECK(!(grad_enabled() && requires_grad()), "copy_: cannot write in place into a tensor that requires grad "
              "(for parameter updates, use a NoGradGuard)");
  Tensor s = src.detach().expand(shape());
  if (numel() > 0) kernels::copy_stub(device(), *this, s);
  return *this;
}

const Tensor& Tensor::fill_(Scalar value) const {
  EMBER_CHECK(!(grad_enabled() && requires_grad()), "fill_: cannot write in place into a tensor that requires grad "
              "(for parameter updates, use a NoGradGuard)");
  if (numel() > 0) kernels::fill_stub(device(), *this, value);
  return *this;
}

// ----- values -----

template <class T>
T Tensor::item() const {
  EMBER_CHECK(numel() == 1, "item: the tensor has ", numel(), " elements (shape ", shape_str(shape()),
              "), expected exactly one");
  detail::check_has_data(!device().is_meta(), "item");
  detail::check_not_capturing(Stream::current(device()), "item");
  return to_vector<T>()[0];
}

double Tensor::at(std::initializer_list<int64_t> index) const {
  EMBER_CHECK(static_cast<int64_t>(index.size()) == dim(), "at: index has ", index.size(),
              " entries but the tensor has ", dim(), " dims");
  Tensor v = *this;
  for (int64_t i : index) v = v.select(0, i);
  return v.item<double>();
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  // A device tensor is read through a copy, which waits for the work that writes it.
  detail::check_has_data(!device().is_meta(), "to_vector");
  detail::check_not_capturing(Stream::current(device()), "to_vector");
  Tensor c = detach().to(dtype_of<T>()).contiguous().to(Device::cpu());
  const T* p = c.data<const T>();
  return std::vector<T>(p, p + numel());
}

#define EMBER_INSTANTIATE_VALUES(T) \
  template T Tensor::item<T>() const; template std::vector<T> Tensor::to_vector<T>() const;
EMBER_INSTANTIATE_VALUES(bool)
EMBER_INSTANTIATE_VALUES(uint8_t)
EMBER_INSTANTIATE_VALUES(int32_t)
EMBER_INSTANTIATE_VALUES(int64_t)
EMBER_INSTANTIATE_VALUES(Half)
EMBER_INSTANTIATE_VALUES(BFloat16)
EMBER_INSTANTIATE_VALUES(float)
EMBER_INSTANTIATE_VALUES(double)
#undef EMBER_INSTANTIATE_VALUES

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

// ----- construction -----

Tensor empty(const Shape& shape, TensorOptions options) {
  init();
  check_shape(shape, "empty");
  const int64_t n = shape_numel(shape);
  EMBER_CHECK(n <= INT64_MAX / element_size(options.dtype), "empty: shape ", shape_str(shape), " of ",
              dtype_name(options.dtype), " needs more than 2^63 bytes");
  const memory::AllocationSite& site = memory::current_site();  // a tensor made outside any op: "empty"
  const memory::SiteScope with_shape(site.op ? site.op : "empty", shape.data(), static_cast<int>(shape.size()),
                                     site.backward);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(n * element_size(options.dtype)), options.device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->offset = 0;
  impl->dtype = options.dtype;
  return Tensor(std::move(impl));
}

Tensor tensor(const std::vector<double>& values, const Shape& shape, TensorOptions options) {
  EMBER_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "tensor: ", values.size(),
              " values do not fill shape ", shape_str(shape), " (", shape_numel(shape), " elements)");
  Tensor host = empty(shape, {kFloat64, Device::cpu()});
  std::copy(values.begin(), values.end(), host.data<double>());
  return host.to(options.dtype).to(options.device);
}

Tensor tensor(const std::vector<double>& values, TensorOptions options) {
  return tensor(values, {static_cast<int64_t>(values.size())}, options);
}

Tensor scalar_tensor(Scalar value, TensorOptions options) {
  Tensor out = empty({}, options);
  out.fill_(value);
  return out;
}

}  // namespace ember
