// CSR patterns (built and checked on the host, once) and csr_linear with its autograd
// formulas: dx through the transposed pattern (Note [CSR transpose for backward] in
// core/sparse.h), dvalues by the sampled product csr_sddmm, dbias as linear's.
#include "core/sparse.h"

#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/autograd_graph.h"
#include "core/dispatch.h"
#include "core/op_utils.h"

namespace ember {
namespace {

Tensor host_int32(const std::vector<int32_t>& v) {
  Tensor t = empty({static_cast<int64_t>(v.size())}, {kInt32, Device::cpu()});
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

// The transpose of a checked CSR pattern: counting sort of the entries by column, stable,
// so each transposed row's columns (the original rows) increase.
void transpose_host(int64_t rows, int64_t cols, const std::vector<int32_t>& rp, const std::vector<int32_t>& ci,
                    std::vector<int32_t>& t_rp, std::vector<int32_t>& t_ci, std::vector<int32_t>& perm) {
  const size_t nnz = ci.size();
  t_rp.assign(cols + 1, 0);
  for (int32_t c : ci) ++t_rp[c + 1];
  for (int64_t c = 0; c < cols; ++c) t_rp[c + 1] += t_rp[c];
  std::vector<int32_t> next(t_rp.begin(), t_rp.end() - 1);
  t_ci.resize(nnz);
  perm.resize(nnz);
  for (int64_t r = 0; r < rows; ++r)
    for (int32_t j = rp[r]; j < rp[r + 1]; ++j) {
      const int32_t at = next[ci[j]]++;
      t_ci[at] = static_cast<int32_t>(r);
      perm[at] = j;
    }
}

// Entry j of row r sits at r * cols + col_idx[j] of the flattened dense matrix.
Tensor flat_positions(const CsrPattern& p) {
  std::vector<int32_t> rp = p.row_ptr().to_vector<int32_t>();
  Tensor rows = empty({p.nnz()}, {kInt64, Device::cpu()});
  int64_t* out = rows.data<int64_t>();
  for (int64_t r = 0; r < p.rows(); ++r)
    for (int32_t j = rp[r]; j < rp[r + 1]; ++j) out[j] = r * p.cols();
  return add(rows.to(p.device()), p.col_idx().to(kInt64));
}

}  // namespace

CsrPattern CsrPattern::from_indices(const Tensor& row_ptr, const Tensor& col_idx, int64_t cols, Device device) {
  detail::check_defined("CsrPattern", row_ptr, "row_ptr");
  detail::check_defined("CsrPattern", col_idx, "col_idx");
  EMBER_CHECK(row_ptr.dim() == 1 && row_ptr.numel() >= 1 && col_idx.dim() == 1,
              "CsrPattern: row_ptr must be [rows + 1] and col_idx [nnz], got ", shape_str(row_ptr.shape()), " and ",
              shape_str(col_idx.shape()));
  EMBER_CHECK(!is_floating(row_ptr.dtype()) && row_ptr.dtype() != kBool && !is_floating(col_idx.dtype()) &&
                  col_idx.dtype() != kBool,
              "CsrPattern: row_ptr and col_idx must be integer tensors, got ", dtype_name(row_ptr.dtype()), " and ",
              dtype_name(col_idx.dtype()));
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  const int64_t rows = row_ptr.numel() - 1, nnz = col_idx.numel();
  EMBER_CHECK(cols >= 0 && cols <= kMax && rows <= kMax && nnz <= kMax, "CsrPattern: [", rows, ", ", cols,
              "] with ", nnz, " entries exceeds the int32 indices");
  const std::vector<int64_t> rp64 = row_ptr.to_vector<int64_t>(), ci64 = col_idx.to_vector<int64_t>();
  EMBER_CHECK(rp64[0] == 0 && rp64[rows] == nnz, "CsrPattern: row_ptr must run from 0 to nnz = ", nnz, ", got ",
              rp64[0], " ... ", rp64[rows]);
  std::vector<int32_t> rp(rows + 1), ci(nnz);
  for (int64_t r = 0; r < rows; ++r) {
    EMBER_CHECK(rp64[r + 1] >= rp64[r], "CsrPattern: row_ptr decreases at row ", r, " (", rp64[r], " then ",
                rp64[r + 1], ")");
    for (int64_t j = rp64[r]; j < rp64[r + 1]; ++j) {
      EMBER_CHECK(ci64[j] >= 0 && ci64[j] < cols, "CsrPattern: col_idx[", j, "] = ", ci64[j], " (row ", r,
                  ") is outside [0, ", cols, ")");
      EMBER_CHECK(j == rp64[r] || ci64[j] > ci64[j - 1], "CsrPattern: the columns of row ", r,
                  " must increase, col_idx[", j, "] = ", ci64[j], " follows ", ci64[j - 1]);
      ci[j] = static_cast<int32_t>(ci64[j]);
    }
    rp[r] = static_cast<int32_t>(rp64[r]);
  }
  rp[rows] = static_cast<int32_t>(nnz);

  std::vector<int32_t> t_rp, t_ci, perm;
  transpose_host(rows, cols, rp, ci, t_rp, t_ci, perm);
  CsrPattern p;
  p.rows_ = rows;
  p.cols_ = cols;
  p.row_ptr_ = host_int32(rp).to(device);
  p.col_idx_ = host_int32(ci).to(device);
  auto t = std::make_shared<CsrPattern>();
  t->rows_ = cols;
  t->cols_ = rows;
  t->row_ptr_ = host_int32(t_rp).to(device);
  t->col_idx_ = host_int32(t_ci).to(device);
  p.t_ = std::move(t);
  p.t_perm_ = host_int32(perm).to(device);
  return p;
}

CsrPattern CsrPattern::nonzeros_of(const Tensor& dense) {
  detail::check_defined("CsrPattern::nonzeros_of", dense);
  EMBER_CHECK(dense.dim() == 2, "CsrPattern::nonzeros_of: expects a 2-D tensor, got ", shape_str(dense.shape()));
  const int64_t rows = dense.size(0), cols = dense.size(1);
  const std::vector<double> v = dense.to_vector<double>();
  std::vector<int64_t> rp(rows + 1, 0), ci;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      if (v[r * cols + c] != 0) ci.push_back(c);
    rp[r + 1] = static_cast<int64_t>(ci.size());
  }
  const auto as_tensor = [](const std::vector<int64_t>& x) {
    Tensor t = empty({static_cast<int64_t>(x.size())}, {kInt64, Device::cpu()});
    std::copy(x.begin(), x.end(), t.data<int64_t>());
    return t;
  };
  return from_indices(as_tensor(rp), as_tensor(ci), cols, dense.device());
}

const CsrPattern& CsrPattern::transpose() const {
  EMBER_CHECK(t_ != nullptr, "CsrPattern: this pattern keeps no transpose (it is one)");
  return *t_;
}

const Tensor& CsrPattern::transpose_perm() const {
  EMBER_CHECK(t_ != nullptr, "CsrPattern: this pattern keeps no transpose (it is one)");
  return t_perm_;
}

CsrPattern CsrPattern::to(Device device) const {
  if (!row_ptr_.defined() || device == this->device()) return *this;
  CsrPattern p = *this;
  p.row_ptr_ = row_ptr_.to(device);
  p.col_idx_ = col_idx_.to(device);
  if (t_) {
    p.t_ = std::make_shared<CsrPattern>(t_->to(device));
    p.t_perm_ = t_perm_.to(device);
  }
  return p;
}

Tensor CsrPattern::gather(const Tensor& dense) const {
  detail::check_defined("CsrPattern::gather", dense);
  EMBER_CHECK(dense.dim() == 2 && dense.size(0) == rows_ && dense.size(1) == cols_, "CsrPattern::gather: expects [",
              rows_, ", ", cols_, "], got ", shape_str(dense.shape()));
  return index_select(dense.reshape({-1}), 0, flat_positions(*this));
}

Tensor CsrPattern::to_dense(const Tensor& values) const {
  detail::check_defined("CsrPattern::to_dense", values);
  EMBER_CHECK(values.dim() == 1 && values.numel() == nnz(), "CsrPattern::to_dense: values must be [", nnz(),
              "], got ", shape_str(values.shape()));
  Tensor flat = zeros({rows_ * cols_}, {values.dtype(), values.device()});
  return scatter_add(flat, 0, flat_positions(*this), values).view({rows_, cols_});
}

int64_t CsrPattern::index_bytes(bool with_transpose) const {
  const int64_t own = (rows_ + 1 + nnz()) * 4;
  return with_transpose && t_ ? own + t_->index_bytes(false) + nnz() * 4 : own;
}

Tensor csr_linear(const Tensor& x, const Tensor& values, const CsrPattern& a, const Tensor& bias, Activation act) {
  EMBER_OP_SITE("csr_linear");
  detail::check_defined("csr_linear", x);
  detail::check_defined("csr_linear", values, "values");
  EMBER_CHECK(a.row_ptr().defined(), "csr_linear: the pattern is empty (make it with CsrPattern::from_indices)");
  detail::check_same_device("csr_linear", {&x, &values, &bias, &a.row_ptr()});
  EMBER_CHECK(values.dim() == 1 && values.numel() == a.nnz(), "csr_linear: values must be [", a.nnz(),
              "] (the pattern's entries), got ", shape_str(values.shape()));
  EMBER_CHECK(x.dim() >= 1 && x.size(-1) == a.cols(), "csr_linear: input ", shape_str(x.shape()), " does not end in ",
              a.cols(), " features (sparse weight [", a.rows(), ", ", a.cols(), "])");
  if (bias.defined())
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == a.rows(), "csr_linear: bias must be [", a.rows(), "], got ",
                shape_str(bias.shape()));
  DType dtype = promote_types(x.dtype(), values.dtype());
  if (bias.defined()) dtype = promote_types(dtype, bias.dtype());
  EMBER_CHECK(is_floating(dtype), "csr_linear: expects floating tensors, got ", dtype_name(dtype));
  const DType compute = dtype == kFloat64 ? kFloat64 : kFloat32;
  Tensor x2 = x.reshape({-1, a.cols()}).to(compute).contiguous();
  Tensor out = empty({x2.size(0), a.rows()}, {compute, x.device()});
  kernels::csr_linear_stub(x.device(), out, x2, a.row_ptr(), a.col_idx(), values.to(compute).contiguous(),
                           bias.defined() ? bias.to(compute).contiguous() : Tensor());
  if (act == Activation::kReLU) out = relu(out);
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  out_shape.push_back(a.rows());
  Tensor y = out.view(out_shape).to(dtype);
  // The weight gradient's kernel (csr_sddmm) has no derivative of its own.
  return autograd::record_once_differentiable("csr_linear", {x, values, bias}, y,
                          [x = x.detach(), v = values.detach(), a, has_bias = bias.defined(), compute,
                           y = act == Activation::kReLU ? y.detach() : Tensor()](const Tensor& g_out) {
    const Tensor g = y.defined() ? detail::relu_backward(g_out, y) : g_out;
    const Tensor g2 = g.reshape({-1, a.rows()}).to(compute).contiguous();
    Tensor gx, gv, gb;
    if (autograd::needs_input_grad(0))  // dy @ A, through A^T's pattern
      gx = csr_linear(g, index_select(v, 0, a.transpose_perm()), a.transpose()).to(x.dtype());
    if (autograd::needs_input_grad(1)) {
      gv = empty({a.nnz()}, {compute, g.device()});
      kernels::csr_sddmm_stub(g.device(), gv, g2, x.reshape({-1, a.cols()}).to(compute).contiguous(), a.row_ptr(),
                              a.col_idx());
      gv = gv.to(v.dtype());
    }
    if (has_bias && autograd::needs_input_grad(2)) gb = sum(g2, {0});
    return std::vector<Tensor>{gx, gv, gb};
  });
}

}  // namespace ember
