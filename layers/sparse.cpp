// SparseLinear, sparsify and weight_memory (layers/sparse.h).
#include "layers/sparse.h"

#include "core/autograd.h"

namespace ember::nn {

SparseLinear::SparseLinear(const Linear& dense)
    : values(register_parameter("values", Tensor())),
      bias(register_parameter("bias", dense.bias.defined() ? dense.bias.detach().clone() : Tensor())),
      pattern_(CsrPattern::nonzeros_of(dense.weight.detach())) {
  NoGradGuard no_grad;
  values = pattern_.gather(dense.weight.detach()).clone().requires_grad_();
}

Tensor SparseLinear::forward(const Tensor& x, Activation act) {
  if (pattern_.device() != values.device()) pattern_ = pattern_.to(values.device());
  return csr_linear(x, values, pattern_, bias, act);
}

std::string SparseLinear::name() const {
  return "SparseLinear(in_features=" + std::to_string(pattern_.cols()) + ", out_features=" +
         std::to_string(pattern_.rows()) + ", nnz=" + std::to_string(pattern_.nnz()) +
         ", bias=" + (bias.defined() ? "true" : "false") + ")";
}

Tensor SparseLinear::dense_weight() const {
  NoGradGuard no_grad;
  return pattern_.to(values.device()).to_dense(values.detach());
}

std::shared_ptr<Module> sparsify(const std::shared_ptr<Module>& model) {
  if (auto* l = dynamic_cast<Linear*>(model.get())) return std::make_shared<SparseLinear>(*l);
  auto* seq = dynamic_cast<Sequential*>(model.get());
  if (!seq) return model;
  auto out = std::make_shared<Sequential>();
  for (const std::shared_ptr<Module>& child : *seq) out->push_back(sparsify(child));
  out->train(model->is_training());
  return out;
}

namespace {
void add_weights(const Module& m, WeightMemory& w) {
  if (auto* l = dynamic_cast<const Linear*>(&m)) {
    const int64_t bytes = l->weight.numel() * l->weight.element_size();
    w.dense_bytes += bytes;
    w.stored_bytes += bytes;
  } else if (auto* s = dynamic_cast<const SparseLinear*>(&m)) {
    const CsrPattern& p = s->pattern();
    w.dense_bytes += p.rows() * p.cols() * s->values.element_size();
    w.stored_bytes += s->values.numel() * s->values.element_size() + p.index_bytes(false);
    w.sparse_backward_index_bytes += p.index_bytes(true) - p.index_bytes(false);
  }
}
}  // namespace

WeightMemory weight_memory(const Module& model) {
  WeightMemory w;
  for (const std::shared_ptr<Module>& m : model.modules()) add_weights(*m, w);  // each module once
  return w;
}

}  // namespace ember::nn
