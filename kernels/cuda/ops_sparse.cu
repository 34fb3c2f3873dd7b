// The CUDA slots of the CSR ops (core/sparse.h): csr_linear through the SpMM variant
// (variants.h: cuSPARSE on a GPU, the hand-written kernel of csr.cuh otherwise) and
// csr_sddmm through the hand-written kernel. Core has checked the pattern and shapes.
#include "kernels/cuda/device.h"
#include "kernels/cuda/csr.cuh"

#include <algorithm>
#include <atomic>
#include <string_view>

#include "kernels/cpu/variant.h"
#if !defined(EMBER_CUDA_EMULATED)
#include "kernels/cuda/csr_cusparse.h"
#endif
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/variants.h"

namespace ember::kernels::cuda {
namespace {

enum class Spmm : int { kAuto, kHandwritten, kCusparse };

Spmm parse_spmm(std::string_view name) {
  if (name == "auto") return Spmm::kAuto;
  if (name == "handwritten") return Spmm::kHandwritten;
  if (name == "cusparse") {
#if defined(EMBER_CUDA_EMULATED)
    EMBER_FAIL("spmm variant 'cusparse' needs a GPU: the emulated CUDA device has no cuSPARSE (use handwritten)");
#endif
    return Spmm::kCusparse;
  }
  EMBER_FAIL("spmm: unknown cuda variant '", name, "' (expected auto, cusparse or handwritten)");
}

std::atomic<Spmm> g_spmm{cpu::variant_from_env("EMBER_SPMM", Spmm::kAuto, +[](std::string_view s) { return parse_spmm(s); })};

#if !defined(EMBER_CUDA_EMULATED)
bool use_cusparse() { return g_spmm.load() != Spmm::kHandwritten; }
#endif

template <class T>
const T* cptr(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

template <class F>
void visit_wide(DType t, const char* op, F&& f) {
  if (t == kFloat64) return f(Tag<double>{});
  EMBER_CHECK(t == kFloat32, op, " (cuda): dtype ", dtype_name(t), " is not supported");
  f(Tag<float>{});
}

void csr_linear_slot(const Tensor& out, const Tensor& x, const Tensor& row_ptr, const Tensor& col_idx,
                     const Tensor& values, const Tensor& bias) {
  const OpScope scope(out);
  const int64_t M = x.size(0), K = x.size(1), N = out.size(1);
  visit_wide(out.dtype(), "csr_linear", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.data_ptr());
#if !defined(EMBER_CUDA_EMULATED)
    if (use_cusparse()) {
      const auto ws = [&](size_t bytes) { return empty({int64_t(std::max<size_t>(bytes, 16))}, {kUInt8, out.device()}); };
      cusparse_csr_linear<T>(o, cptr<T>(x), cptr<int32_t>(row_ptr), cptr<int32_t>(col_idx), cptr<T>(values),
                             cptr<T>(bias), M, K, N, col_idx.numel(), ws, out.device().index, scope.stream());
      return;
    }
#endif
    csr_linear<T>(o, cptr<T>(x), cptr<int32_t>(row_ptr), cptr<int32_t>(col_idx), cptr<T>(values), cptr<T>(bias), M,
                  K, N, scope.stream());
  });
}

void csr_sddmm_slot(const Tensor& dvalues, const Tensor& dy, const Tensor& x, const Tensor& row_ptr,
                    const Tensor& col_idx) {
  const OpScope scope(dvalues);
  visit_wide(dvalues.dtype(), "csr_sddmm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    csr_sddmm<T>(static_cast<T*>(dvalues.data_ptr()), cptr<T>(dy), cptr<T>(x), cptr<int32_t>(row_ptr),
                 cptr<int32_t>(col_idx), x.size(0), x.size(1), dy.size(1), col_idx.numel(), scope.stream());
  });
}

}  // namespace

void set_spmm_variant(std::string_view name) { g_spmm = parse_spmm(name); }

std::string spmm_variant() {
  switch (g_spmm.load()) {
    case Spmm::kHandwritten: return "handwritten";
    case Spmm::kCusparse: return "cusparse";
    default: return "auto";
  }
}

void register_sparse() {
  csr_linear_stub.set(DeviceType::CUDA, csr_linear_slot);
  csr_sddmm_stub.set(DeviceType::CUDA, csr_sddmm_slot);
}

}  // namespace ember::kernels::cuda
