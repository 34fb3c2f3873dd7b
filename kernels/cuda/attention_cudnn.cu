// cuDNN's fused attention forward (attention_cudnn.h) through the backend API: tensor
// descriptors for Q, K, V, O, the statistics and the scale (a float passed by value), one
// SDPA forward operation, its operation graph, cuDNN's heuristic engine configurations
// (mode A) tried in order until an execution plan finalizes; the plan and its workspace
// size cached per (handle, dtype, BH, L, S, E), a shape with no engine cached as such.
// Dims are [1, BH, rows, E] with the folded tensors' strides (batch x heads as heads).
// No cuDNN header leaves this file (DESIGN.md).
#include "kernels/cuda/attention_cudnn.h"

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <cudnn.h>

#include "kernels/cuda/cudnn_handle.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/scratch.h"

namespace ember::kernels::cuda {
namespace {

using Desc = cudnnBackendDescriptor_t;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kScale };

// A descriptor owned for the life of a cached plan (cuDNN keeps references to the ones a
// finalized descriptor was built from).
struct Owned {
  std::vector<Desc> all;
  ~Owned() {
    for (auto it = all.rbegin(); it != all.rend(); ++it) cudnnBackendDestroyDescriptor(*it);
  }
  Desc make(cudnnBackendDescriptorType_t type) {
    Desc d = nullptr;
    EMBER_CUDA_CHECK(cudnnBackendCreateDescriptor(type, &d));
    all.push_back(d);
    return d;
  }
};

void set(Desc d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* v) {
  EMBER_CUDA_CHECK(cudnnBackendSetAttribute(d, name, type, count, v));
}

// A [1, BH, rows, cols] tensor of `type` with the given row stride (cols contiguous).
Desc tensor(Owned& o, Uid uid, cudnnDataType_t type, int64_t BH, int64_t rows, int64_t cols, bool by_value = false) {
  Desc d = o.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const std::array<int64_t, 4> dims{1, BH, rows, cols}, strides{BH * rows * cols, rows * cols, cols, 1};
  const int64_t id = uid, align = 16;
  set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
  set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
  set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id);
  set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  if (by_value) {
    const bool yes = true;
    set(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
  }
  EMBER_CUDA_CHECK(cudnnBackendFinalize(d));
  return d;
}

struct Plan {
  Owned owned;
  Desc plan = nullptr;
  int64_t workspace = 0;
};

// The plan of one shape, or null when cuDNN has no engine for it (an operation or graph
// that does not finalize, or no configuration whose plan does).
std::shared_ptr<Plan> build(cudnnHandle_t h, cudnnDataType_t type, int64_t BH, int64_t L, int64_t S, int64_t E) {
  auto p = std::make_shared<Plan>();
  Owned& o = p->owned;
  const Desc q = tensor(o, kQ, type, BH, L, E), k = tensor(o, kK, type, BH, S, E), v = tensor(o, kV, type, BH, S, E);
  const Desc out = tensor(o, kO, type, BH, L, E), stats = tensor(o, kStats, CUDNN_DATA_FLOAT, BH, L, 1);
  const Desc scale = tensor(o, kScale, CUDNN_DATA_FLOAT, 1, 1, 1, /*by_value=*/true);
  Desc op = o.make(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
  set(op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &q);
  set(op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k);
  set(op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
  set(op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &out);
  set(op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &stats);
  set(op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &scale);
  if (cudnnBackendFinalize(op) != CUDNN_STATUS_SUCCESS) return nullptr;
  Desc graph = o.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
  set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op);
  if (cudnnBackendFinalize(graph) != CUDNN_STATUS_SUCCESS) return nullptr;
  Desc heur = o.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (cudnnBackendFinalize(heur) != CUDNN_STATUS_SUCCESS) return nullptr;
  int64_t count = 0;
  EMBER_CUDA_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                            &count, nullptr));
  if (count <= 0) return nullptr;
  std::vector<Desc> configs(static_cast<size_t>(count));
  for (Desc& c : configs) c = o.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t got = 0;
  EMBER_CUDA_CHECK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                            &got, configs.data()));
  for (int64_t i = 0; i < got; ++i) {
    Desc plan = o.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &configs[size_t(i)]);
    if (cudnnBackendFinalize(plan) != CUDNN_STATUS_SUCCESS) continue;
    int64_t n = 0;
    EMBER_CUDA_CHECK(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                              &p->workspace));
    p->plan = plan;
    return p;
  }
  return nullptr;
}

// Per (handle, dtype, BH, L, S, E): the plan, or null (no engine: the caller's kernels).
std::shared_ptr<Plan> plan_for(cudnnHandle_t h, cudnnDataType_t type, int64_t BH, int64_t L, int64_t S, int64_t E) {
  using Key = std::array<int64_t, 6>;
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<Plan>> cache;
  const Key key{reinterpret_cast<int64_t>(h), int64_t(type), BH, L, S, E};
  {
    std::lock_guard lock(mu);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  std::shared_ptr<Plan> p = cudnnGetVersion() >= 91300 ? build(h, type, BH, L, S, E) : nullptr;
  std::lock_guard lock(mu);
  return cache.emplace(key, std::move(p)).first->second;
}

}  // namespace

bool cudnn_attention_applies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             const AttentionParams& p) {
  const bool half = q.dtype() == DType::BFloat16 || q.dtype() == DType::Float16;
  const int64_t E = q.size(2);
  return half && !mask.defined() && !p.causal && p.dropout_p == 0 && v.size(2) == E && E % 8 == 0 && E <= 256 &&
         k.size(1) > 0 && q.size(1) > 0;
}

bool cudnn_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                             double scale) {
  const OpScope scope(q);
  const int dev = q.device().index;
  const cudnnHandle_t h = cudnn_handle(dev, scope.stream());
  const cudnnDataType_t type = q.dtype() == DType::BFloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  const std::shared_ptr<Plan> p = plan_for(h, type, q.size(0), q.size(1), k.size(1), q.size(2));
  if (!p) return false;
  const DeviceScratch ws(dev, scope.stream(), static_cast<std::size_t>(p->workspace));
  float scale_value = static_cast<float>(scale);
  const std::array<int64_t, 6> uids{kQ, kK, kV, kO, kStats, kScale};
  std::array<void*, 6> ptrs{q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), &scale_value};
  Owned o;
  Desc pack = o.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  void* workspace = ws.get();
  set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 6, uids.data());
  set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 6, ptrs.data());
  set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  EMBER_CUDA_CHECK(cudnnBackendFinalize(pack));
  EMBER_CUDA_CHECK(cudnnBackendExecute(h, p->plan, pack));
  return true;
}

}  // namespace ember::kernels::cuda
