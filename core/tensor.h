// Tensor: a typed, strided view of a Storage on one device.
//
// A Tensor is a cheap handle (a shared pointer); copying it shares the data. Views
// (view, permute, narrow, select, expand, ...) share the storage and change only the
// shape, strides and offset; contiguous(), clone() and to() copy. Ops live in
// core/ops.h as free functions; the common ones also have a member form (x.relu()).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/scalar.h"
#include "core/shape.h"

namespace ember {

class Storage;
namespace autograd { struct AutogradMeta; }

// What a new tensor is made of. Converts from a DType or a Device, so
// zeros({2, 3}, kFloat64) and zeros({2, 3}, Device::cuda()) both read well; what is not
// given is the default (float32, default_device()).
struct TensorOptions {
  DType dtype = kFloat32;
  Device device = default_device();  // core/device.h: the CPU unless set

  TensorOptions() = default;
  TensorOptions(DType t) : dtype(t) {}      // NOLINT
  TensorOptions(Device d) : device(d) {}    // NOLINT
  TensorOptions(DType t, Device d) : dtype(t), device(d) {}
  TensorOptions with_dtype(DType t) const { return {t, device}; }
  TensorOptions with_device(Device d) const { return {dtype, d}; }
};

// The state behind a Tensor handle. Kernels read it through Tensor's accessors.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;   // in elements
  int64_t offset;  // in elements, from the start of the storage
  DType dtype;
  std::shared_ptr<autograd::AutogradMeta> autograd;  // null until autograd needs it
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  DType dtype() const { return impl().dtype; }
  Device device() const;
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  const Shape& shape() const { return impl().shape; }
  const Shape& strides() const { return impl().strides; }
  int64_t size(int64_t dim) const;    // negative dims count from the end
  int64_t stride(int64_t dim) const;
  int64_t offset() const { return impl().offset; }
  int64_t numel() const { return shape_numel(impl().shape); }
  int64_t element_size() const { return ember::element_size(dtype()); }
  bool is_contiguous() const;
  // True when both handles view the same storage.
  bool shares_storage_with(const Tensor& other) const;

  // Address of the first element of this view.
  void* data_ptr() const;
  // Typed address; throws ember::Error when T does not match dtype().
  template <class T> T* data() const;

  // ----- views: no copy, the result shares this tensor's storage -----
  // view: the new shape must be compatible with the strides (one dim may be -1).
  Tensor view(const Shape& shape) const;
  // reshape: a view when the strides allow it, a copy otherwise.
  Tensor reshape(const Shape& shape) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // transpose of a 2-D tensor (a 0-D or 1-D tensor is returned as is)
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  // slice(dim, start, end, step) like Python's t[..., start:end:step]; bounds are clamped.
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  // expand: size-1 dims (and new leading dims) broadcast with stride 0; -1 keeps a size.
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  // Every window of `size` elements along dim, `step` apart, as a new last dim (windows
  // may overlap: the gradient adds up over them).
  Tensor unfold(int64_t dim, int64_t size, int64_t step) const;
  // Views along dim: core/ops.h's split and chunk.
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(const std::vector<int64_t>& split_sizes, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;

  // ----- copies -----
  Tensor contiguous() const;  // this tensor itself when already contiguous
  Tensor clone() const;
  Tensor to(DType dtype) const;    // this tensor itself when the dtype already matches
  // A copy on `device` (this tensor itself when already there). To or from a CUDA
  // device it is queued on that device's current stream; the call returns when the data
  // has arrived, unless non_blocking and the host side is pinned (pin_memory()): then it
  // returns at once, and the stream's later work sees the data.
  Tensor to(Device device, bool non_blocking = false) const;
  // A copy of this CPU tensor in page-locked (pinned) host memory; itself when already
  // pinned. Throws ember::Error in a build without CUDA.
  Tensor pin_memory() const;
  bool is_pinned() const;
  // This tensor's memory is also used by work on `stream`: when the last handle to it
  // goes, the memory is reused only once that work is done (PyTorch's record_stream).
  void record_stream(const class Stream& stream) const;

  // ----- in place -----
  // Copies src (broadcast to this shape, converted to this dtype) into this view.
  const Tensor& copy_(const Tensor& src) const;
  const Tensor& fill_(Scalar value) const;
  const Tensor& zero_() const { return fill_(0); }
  // Adds other (broadcast to this shape, converted to this dtype) into this view: one
  // pass where copy_(add(...)) makes two, and no temporary. Not recorded by autograd.
  const Tensor& add_(const Tensor& other) const;
  const Tensor& add_(Scalar other) const;  // other by value, as Note [Scalar operands]
  const Tensor& sub_(const Tensor& other) const;
  const Tensor& sub_(Scalar other) const;
  const Tensor& mul_(const Tensor& other) const;
  const Tensor& mul_(Scalar other) const;
  const Tensor& div_(const Tensor& other) const;
  const Tensor& div_(Scalar other) const;
  // x += y is x.add_(y), and so on, as in libtorch.
  const Tensor& operator+=(const Tensor& other) const { return add_(other); }
  const Tensor& operator+=(Scalar other) const { return add_(other); }
  const Tensor& operator-=(const Tensor& other) const { return sub_(other); }
  const Tensor& operator-=(Scalar other) const { return sub_(other); }
  const Tensor& operator*=(const Tensor& other) const { return mul_(other); }
  const Tensor& operator*=(Scalar other) const { return mul_(other); }
  const Tensor& operator/=(const Tensor& other) const { return div_(other); }
  const Tensor& operator/=(Scalar other) const { return div_(other); }

  // Makes every handle of this tensor see `src`'s data, shape and dtype (src's storage is
  // shared, not copied). Keeps autograd state, so a parameter moved with Module::to()
  // stays the same parameter. Not recorded by autograd.
  void set_data(const Tensor& src) const;

  // ----- values -----
  // The only element of a one-element tensor, converted to T.
  template <class T = double> T item() const;
  // One element, converted to double; the index has one entry per dim.
  double at(std::initializer_list<int64_t> index) const;
  // All elements in row-major order, converted to T.
  template <class T> std::vector<T> to_vector() const;
  // Readable text in PyTorch's layout: tensor([[1.0000, 2.0000], ...], dtype=float64)
  std::string str() const;

  // ----- autograd (core/autograd.h has the rest) -----
  bool requires_grad() const;
  // Marks a leaf tensor (one no op produced) as a parameter whose gradient backward()
  // accumulates into grad(). Floating dtypes only.
  const Tensor& requires_grad_(bool on = true) const;
  bool is_leaf() const;  // made by the user, not by an op that recorded a graph
  // The accumulated gradient of a leaf; undefined before the first backward reaches it.
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;  // an undefined tensor clears it
  // Backpropagates from this tensor: `grad` defaults to 1 for a one-element tensor. The
  // graph's saved tensors are freed unless retain_graph is true.
  void backward(const Tensor& grad = {}, bool retain_graph = false) const;
  // The same data, cut from the graph (never requires grad).
  Tensor detach() const;
  // Name of the op that made this tensor ("matmul", ...), empty for leaves.
  std::string grad_fn_name() const;
  // Called on a leaf each time a backward has finished accumulating its gradient.
  void register_post_accumulate_grad_hook(std::function<void(const Tensor& leaf)> hook) const;

  // ----- member forms of core's ops (core/ops.h has each op's semantics; these call it:
  // x.relu() is relu(x), as in libtorch). Defined in core/tensor_methods.cpp. -----
  Tensor add(const Tensor& other) const;
  Tensor add(Scalar other) const;
  Tensor sub(const Tensor& other) const;
  Tensor sub(Scalar other) const;
  Tensor mul(const Tensor& other) const;
  Tensor mul(Scalar other) const;
  Tensor div(const Tensor& other) const;
  Tensor div(Scalar other) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor pow(Scalar exponent) const;
  Tensor maximum(const Tensor& other) const;
  Tensor minimum(const Tensor& other) const;
  Tensor neg() const;
  Tensor abs() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor relu() const;
  Tensor gelu(bool approximate = false) const;
  Tensor erf() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  Tensor clamp(std::optional<double> min, std::optional<double> max) const;
  Tensor eq(const Tensor& other) const;
  Tensor eq(Scalar other) const;
  Tensor ne(const Tensor& other) const;
  Tensor ne(Scalar other) const;
  Tensor lt(const Tensor& other) const;
  Tensor lt(Scalar other) const;
  Tensor le(const Tensor& other) const;
  Tensor le(Scalar other) const;
  Tensor gt(const Tensor& other) const;
  Tensor gt(Scalar other) const;
  Tensor ge(const Tensor& other) const;
  Tensor ge(Scalar other) const;
  // Reductions over `dims`, all when empty: x.sum(), x.sum({1}), x.mean({1, 2}, true). (No
  // single-int form: with one, x.sum({}, true) would pick it and reduce dim 0.)
  Tensor sum(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor mean(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor amax(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor amin(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor var(const std::vector<int64_t>& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor max() const;  // over all elements
  Tensor min() const;
  std::pair<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;  // (values, indices)
  std::pair<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor norm(double p = 2, const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor all() const;
  Tensor all(int64_t dim, bool keepdim = false) const;
  Tensor any() const;
  Tensor any(int64_t dim, bool keepdim = false) const;
  std::pair<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  // view(other.shape()), reshape(other.shape()); to(other.dtype()); to other's device and dtype.
  Tensor view_as(const Tensor& other) const;
  Tensor reshape_as(const Tensor& other) const;
  Tensor type_as(const Tensor& other) const;
  Tensor to(Device device, DType dtype, bool non_blocking = false) const;
  Tensor to(const Tensor& other, bool non_blocking = false) const;

  const TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Tensors by name, in order: state dicts and checkpoint contents.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// A tensor over fresh storage; its contents are unspecified.
Tensor empty(const Shape& shape, TensorOptions options = {});
// A tensor holding these values (row-major), converted to options.dtype.
Tensor tensor(const std::vector<double>& values, const Shape& shape, TensorOptions options = {});
Tensor tensor(const std::vector<double>& values, TensorOptions options = {});  // 1-D
Tensor scalar_tensor(Scalar value, TensorOptions options = {});  // 0-D

}  // namespace ember
