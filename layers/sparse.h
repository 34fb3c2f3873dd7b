// Linear layers with a sparse (CSR) weight, made from pruned dense ones (layers/prune.h),
// and the weight memory they save. The pattern is fixed when the layer is made; the
// values are the trainable parameter, so pruned weights stay zero by construction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/sparse.h"
#include "layers/layers.h"

namespace ember::nn {

class SparseLinear : public Callable<SparseLinear> {
 public:
  // The nonzeros of `dense`'s weight become the pattern and "values" [nnz]; "bias" is a
  // copy of dense's (or undefined). Same device and dtype as dense.
  explicit SparseLinear(const Linear& dense);
  Tensor forward(const Tensor& x) { return forward(x, Activation::kNone); }
  Tensor forward(const Tensor& x, Activation act);
  std::string name() const override;
  // The weight as a dense [out, in] tensor (a copy, outside autograd).
  Tensor dense_weight() const;
  const CsrPattern& pattern() const { return pattern_; }
  Tensor& values;  // [nnz]
  Tensor& bias;    // [out], or undefined (Note [One place per parameter] in layers/module.h)

 private:
  CsrPattern pattern_;  // follows values to its device on the next forward (Module::to)
};

// `model` with every Linear replaced by a SparseLinear of its weight's nonzeros: a Linear
// itself, or the Linear children of Sequential containers (recursively, rebuilt; other
// modules are shared, not copied). Other containers are returned as they are.
std::shared_ptr<Module> sparsify(const std::shared_ptr<Module>& model);

// Bytes of the Linear weights of a model: as dense matrices, and as stored (a Linear's
// dense weight; a SparseLinear's values and CSR indices). `sparse_backward_index_bytes`:
// what a SparseLinear keeps besides for its input gradient (Note [CSR transpose for
// backward] in core/sparse.h), needed for training only. Biases are not counted.
struct WeightMemory {
  int64_t dense_bytes = 0;
  int64_t stored_bytes = 0;
  int64_t sparse_backward_index_bytes = 0;
};
WeightMemory weight_memory(const Module& model);

}  // namespace ember::nn
