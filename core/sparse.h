// Sparse matrices in compressed sparse row (CSR) form, for pruned Linear weights
// (layers/sparse.h): the pattern (which entries exist) is fixed and checked once; the
// values are an ordinary tensor, so they can be a trainable parameter.
//
// Note [CSR transpose for backward]. linear's input gradient is dy @ A, a product with
// A's transpose in CSR form. The pattern keeps that transpose's structure and a
// permutation into the values, so backward is the same CSR kernel again: no atomics on
// any device (same bits every run), two primitive ops in all (csr_linear, csr_sddmm). It
// costs cols + 1 + 2 nnz int32s more, counted by index_bytes().
#pragma once

#include <cstdint>
#include <memory>

#include "core/ops.h"
#include "core/tensor.h"

namespace ember {

class CsrPattern {
 public:
  CsrPattern() = default;
  // The pattern of A [rows, cols] from row_ptr [rows + 1] and col_idx [nnz] (integer
  // tensors on any device, copied to the host to be checked): row_ptr starts at 0, never
  // decreases and ends at nnz; each row's columns lie in [0, cols) and increase. Anything
  // else is an ember::Error naming the first bad entry. Built on `device`.
  static CsrPattern from_indices(const Tensor& row_ptr, const Tensor& col_idx, int64_t cols, Device device);
  // The pattern of the nonzeros of a 2-D tensor (on its device).
  static CsrPattern nonzeros_of(const Tensor& dense);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t nnz() const { return col_idx_.defined() ? col_idx_.numel() : 0; }
  Device device() const { return row_ptr_.device(); }
  const Tensor& row_ptr() const { return row_ptr_; }  // int32 [rows + 1]
  const Tensor& col_idx() const { return col_idx_; }  // int32 [nnz]
  // The transpose's pattern, and where its entries are in this pattern's values:
  // transposed values = index_select(values, 0, transpose_perm()).
  const CsrPattern& transpose() const;
  const Tensor& transpose_perm() const;  // int32 [nnz]

  CsrPattern to(Device device) const;
  // The values of `dense` [rows, cols] at this pattern's entries, in CSR order [nnz].
  Tensor gather(const Tensor& dense) const;
  // The dense [rows, cols] matrix holding `values` [nnz] at the pattern's entries.
  Tensor to_dense(const Tensor& values) const;
  // Bytes of the indices: the forward's (row_ptr, col_idx), and with the transpose's.
  int64_t index_bytes(bool with_transpose = true) const;

 private:
  int64_t rows_ = 0, cols_ = 0;
  Tensor row_ptr_, col_idx_;
  // Shared with copies; a transpose's own transpose is empty (it is never needed).
  std::shared_ptr<const CsrPattern> t_;
  Tensor t_perm_;
};

// act(x [..., cols] @ A^T + bias [rows]) for the CSR matrix A with `values` [nnz] on
// `a`'s pattern (bias may be undefined): nn::Linear's forward with a sparse weight.
// float32 or float64 tensors (16-bit ones are computed in float32), all on a's device.
// Differentiable in x, values and bias; the values' gradient is the sampled product
// dvalues[j] = sum over rows m of dy[m, row(j)] * x[m, col(j)].
Tensor csr_linear(const Tensor& x, const Tensor& values, const CsrPattern& a, const Tensor& bias = {},
                  Activation act = Activation::kNone);

}  // namespace ember
