// Tensor's member forms of core's ops (core/tensor.h): each calls the free function of
// core/ops.h, which alone holds the op's checks and semantics.
#include "core/ops.h"
#include "core/tensor.h"

namespace ember {

Tensor Tensor::add(const Tensor& other) const { return ember::add(*this, other); }
Tensor Tensor::add(Scalar other) const { return ember::add(*this, other); }
Tensor Tensor::sub(const Tensor& other) const { return ember::sub(*this, other); }
Tensor Tensor::sub(Scalar other) const { return ember::sub(*this, other); }
Tensor Tensor::mul(const Tensor& other) const { return ember::mul(*this, other); }
Tensor Tensor::mul(Scalar other) const { return ember::mul(*this, other); }
Tensor Tensor::div(const Tensor& other) const { return ember::div(*this, other); }
Tensor Tensor::div(Scalar other) const { return ember::div(*this, other); }
Tensor Tensor::pow(const Tensor& exponent) const { return ember::pow(*this, exponent); }
Tensor Tensor::pow(Scalar exponent) const { return ember::pow(*this, exponent); }
Tensor Tensor::maximum(const Tensor& other) const { return ember::maximum(*this, other); }
Tensor Tensor::minimum(const Tensor& other) const { return ember::minimum(*this, other); }
Tensor Tensor::neg() const { return ember::neg(*this); }
Tensor Tensor::abs() const { return ember::abs(*this); }
Tensor Tensor::exp() const { return ember::exp(*this); }
Tensor Tensor::log() const { return ember::log(*this); }
Tensor Tensor::sqrt() const { return ember::sqrt(*this); }
Tensor Tensor::rsqrt() const { return ember::rsqrt(*this); }
Tensor Tensor::relu() const { return ember::relu(*this); }
Tensor Tensor::gelu(bool approximate) const { return ember::gelu(*this, approximate); }
Tensor Tensor::erf() const { return ember::erf(*this); }
Tensor Tensor::tanh() const { return ember::tanh(*this); }
Tensor Tensor::sigmoid() const { return ember::sigmoid(*this); }
Tensor Tensor::sin() const { return ember::sin(*this); }
Tensor Tensor::cos() const { return ember::cos(*this); }
Tensor Tensor::tril(int64_t diagonal) const { return ember::tril(*this, diagonal); }
Tensor Tensor::triu(int64_t diagonal) const { return ember::triu(*this, diagonal); }
Tensor Tensor::norm(double p, const std::vector<int64_t>& dims, bool keepdim) const {
  return ember::norm(*this, p, dims, keepdim);
}
Tensor Tensor::all() const { return ember::all(*this); }
Tensor Tensor::all(int64_t dim, bool keepdim) const { return ember::all(*this, dim, keepdim); }
Tensor Tensor::any() const { return ember::any(*this); }
Tensor Tensor::any(int64_t dim, bool keepdim) const { return ember::any(*this, dim, keepdim); }
std::pair<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return ember::topk(*this, k, dim, largest, sorted);
}
std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const { return ember::split(*this, split_size, dim); }
std::vector<Tensor> Tensor::split(const std::vector<int64_t>& split_sizes, int64_t dim) const {
  return ember::split(*this, split_sizes, dim);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const { return ember::chunk(*this, chunks, dim); }
Tensor Tensor::clamp(std::optional<double> min, std::optional<double> max) const { return ember::clamp(*this, min, max); }
Tensor Tensor::eq(const Tensor& other) const { return ember::eq(*this, other); }
Tensor Tensor::eq(Scalar other) const { return ember::eq(*this, other); }
Tensor Tensor::ne(const Tensor& other) const { return ember::ne(*this, other); }
Tensor Tensor::ne(Scalar other) const { return ember::ne(*this, other); }
Tensor Tensor::lt(const Tensor& other) const { return ember::lt(*this, other); }
Tensor Tensor::lt(Scalar other) const { return ember::lt(*this, other); }
Tensor Tensor::le(const Tensor& other) const { return ember::le(*this, other); }
Tensor Tensor::le(Scalar other) const { return ember::le(*this, other); }
Tensor Tensor::gt(const Tensor& other) const { return ember::gt(*this, other); }
Tensor Tensor::gt(Scalar other) const { return ember::gt(*this, other); }
Tensor Tensor::ge(const Tensor& other) const { return ember::ge(*this, other); }
Tensor Tensor::ge(Scalar other) const { return ember::ge(*this, other); }

Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const { return ember::sum(*this, dims, keepdim); }
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const { return ember::mean(*this, dims, keepdim); }
Tensor Tensor::amax(const std::vector<int64_t>& dims, bool keepdim) const { return ember::amax(*this, dims, keepdim); }
Tensor Tensor::amin(const std::vector<int64_t>& dims, bool keepdim) const { return ember::amin(*this, dims, keepdim); }
Tensor Tensor::var(const std::vector<int64_t>& dims, int64_t correction, bool keepdim) const {
  return ember::var(*this, dims, correction, keepdim);
}
Tensor Tensor::max() const { return ember::max(*this); }
Tensor Tensor::min() const { return ember::min(*this); }
std::pair<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const { return ember::max(*this, dim, keepdim); }
std::pair<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const { return ember::min(*this, dim, keepdim); }
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const { return ember::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin(std::optional<int64_t> dim, bool keepdim) const { return ember::argmin(*this, dim, keepdim); }

Tensor Tensor::matmul(const Tensor& other) const { return ember::matmul(*this, other); }
Tensor Tensor::softmax(int64_t dim) const { return ember::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return ember::log_softmax(*this, dim); }
Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return ember::index_select(*this, dim, index); }
Tensor Tensor::gather(int64_t dim, const Tensor& index) const { return ember::gather(*this, dim, index); }
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  return ember::scatter_add(*this, dim, index, src);
}

Tensor Tensor::view_as(const Tensor& other) const { return view(other.shape()); }
Tensor Tensor::reshape_as(const Tensor& other) const { return reshape(other.shape()); }
Tensor Tensor::type_as(const Tensor& other) const { return to(other.dtype()); }
// The dtype first, on the source's device, when that shrinks the data to copy; else after.
Tensor Tensor::to(Device device, DType dtype, bool non_blocking) const {
  if (ember::element_size(dtype) < element_size()) return to(dtype).to(device, non_blocking);
  return to(device, non_blocking).to(dtype);
}
Tensor Tensor::to(const Tensor& other, bool non_blocking) const { return to(other.device(), other.dtype(), non_blocking); }

}  // namespace ember
