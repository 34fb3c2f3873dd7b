// The CUDA slots of fused attention (core/dispatch.h's attention and attention_backward):
// the host launchers of attention.cuh's SIMT kernels, for every floating dtype (16-bit
// inputs computed in float32, float64 in float64), and of the tensor-core kernels
// (attention_tc.cuh, attention_tc_bwd.cuh) where they apply: bf16 and f16, head dims 64
// and 128, 16-byte aligned rows, sm_80+; and the split-KV decode forward
// (attention_decode.cuh) for at most 4 query rows against at least 128 keys, every dtype,
// whose out and lse the backward kernels take as the forward's (variants.h's
// set_attention_variant); under EMBER_ATTENTION=cudnn, cuDNN's fused forward where it
// takes the call (attention_cudnn.h; its statistics are the lse the backward kernels
// take). Core has folded the batch dims, made
// q, k, v contiguous and kept the head dims within the kernels' 256 (128 for float64,
// whose tiles would not fit in shared memory). The backward's D = rowsum(dout * out) is
// a workspace from the device's caching allocator, on the op's stream.
#include "kernels/cuda/device.h"
#include "kernels/cuda/attention.cuh"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "kernels/cpu/variant.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/attention_tc.cuh"
#include "kernels/cuda/attention_tc_bwd.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/variants.h"

namespace ember::kernels::cuda {
namespace {

// variants.h's names for the forward's choice.
enum class Flash { Auto, Simt, Decode };

Flash parse_attention(std::string_view s) {
  if (s == "auto") return Flash::Auto;
  if (s == "simt") return Flash::Simt;
  if (s == "decode") return Flash::Decode;
  EMBER_FAIL("attention variant: expected auto, simt or decode, got \"", s, "\"");
}
std::atomic<Flash> g_flash{
    cpu::variant_from_env("EMBER_FLASH", Flash::Auto, +[](std::string_view s) { return parse_attention(s); })};

// The split-KV decode forward: "decode" wherever its L fits, "auto" also needs a long cache.
bool use_decode(Flash f, int64_t L, int64_t S) {
  if (f == Flash::Simt || L > attention_decode::kRows) return false;
  return f == Flash::Decode || S >= attention_decode::kMinKeys;
}

// EMBER_ATTENTION=cudnn, read at each call as core reads it; in a build without cuDNN
// (the emulated one) it is reported once on stderr and the kernels here run, as EMBER_CONV.
bool cudnn_requested() {
  const char* env = std::getenv("EMBER_ATTENTION");
  if (!env || std::string_view(env) != "cudnn") return false;
#if defined(EMBER_WITH_CUDNN)
  return true;
#else
  static std::atomic<bool> told{false};
  if (!told.exchange(true))
    std::fprintf(stderr, "ember: ignoring EMBER_ATTENTION=cudnn: this build has no cuDNN (the flash kernels run)\n");
  return false;
#endif
}

thread_local const char* t_last_forward = "";

template <class C>
attention_detail::Params<C> params_of(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                      const AttentionParams& p) {
  attention_detail::Params<C> P{};
  P.BH = q.size(0), P.L = q.size(1), P.S = k.size(1), P.E = q.size(2), P.Ev = v.size(2);
  EMBER_CHECK(P.E <= attention_detail::kMaxHead && P.Ev <= attention_detail::kMaxHead, "attention (cuda): head dims ",
              P.E, " and ", P.Ev, " exceed the kernel's ", attention_detail::kMaxHead);
  if (mask.defined()) {
    EMBER_CHECK(mask.dtype() == (std::is_same_v<C, double> ? kFloat64 : kFloat32), "attention (cuda): the mask is ",
                dtype_name(mask.dtype()), ", not the compute dtype");
    P.mask = static_cast<const C*>(mask.data_ptr());
    P.mb = mask.stride(0), P.ml = mask.stride(1), P.ms = mask.stride(2);
  }
  P.scale = C(p.scale);
  P.causal = p.causal;
  P.p = C(p.dropout_p);
  P.keep_scale = C(1 / (1 - p.dropout_p));
  P.seed = p.philox.seed, P.offset = p.philox.offset;
  return P;
}

template <class F>
void visit_attention_dtype(DType t, const char* op, F&& f) {
  const bool ok = t == kFloat32 || t == kFloat64 || t == kFloat16 || t == kBFloat16;
  EMBER_CHECK(ok, op, " (cuda): dtype ", dtype_name(t), " is not supported");
  visit_cuda_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T> || is_16bit_float_v<T>) f(tag);
  });
}

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

void attention_kernel(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                      const Tensor& mask, const AttentionParams& p) {
  const OpScope scope(q);
  visit_attention_dtype(q.dtype(), "attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
#if defined(EMBER_WITH_CUDNN)
    if (cudnn_requested() && cudnn_attention_applies(q, k, v, mask, p) &&
        cudnn_attention_forward(out, lse, q, k, v, p.scale)) {
      t_last_forward = "cudnn";
      return;
    }
#else
    (void)cudnn_requested();
#endif
    const Flash flash = g_flash.load();
    if (use_decode(flash, q.size(1), k.size(1))) {
      // The partials: (m, l) and the unnormalized output per warp's chunk of keys and row.
      const int64_t parts = attention_decode::parts_for(q.size(0), k.size(1));
      const Tensor ml = empty({q.size(0), parts, q.size(1), 2}, {lse.dtype(), q.device()});
      const Tensor part_o = empty({q.size(0), parts, q.size(1), v.size(2)}, {lse.dtype(), q.device()});
      t_last_forward = "decode";
      return attention_decode_forward<T, C>(ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<T>(out),
                                            ptr<C>(lse), ptr<C>(ml), ptr<C>(part_o),
                                            params_of<C>(q, k, v, mask, p), scope.stream());
    }
    if constexpr (tc::is_mma_type_v<T>) {
      if (flash != Flash::Simt &&
          attention_tc_supported(ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), q.size(2), v.size(2))) {
        t_last_forward = "tc";
        return attention_tc_forward<T>(ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<T>(out), ptr<C>(lse),
                                       params_of<C>(q, k, v, mask, p), scope.stream());
      }
    }
    t_last_forward = "simt";
    attention_forward<T, C>(ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<T>(out), ptr<C>(lse),
                            params_of<C>(q, k, v, mask, p), scope.stream());
  });
}

void attention_backward_kernel(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                               const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                               const Tensor& mask, const AttentionParams& p) {
  const OpScope scope(q);
  visit_attention_dtype(q.dtype(), "attention_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const Tensor d = empty({std::max<int64_t>(1, q.size(0) * q.size(1))}, {lse.dtype(), q.device()});
    if constexpr (tc::is_mma_type_v<T>) {
      if (g_flash.load() != Flash::Simt &&
          attention_tc_supported(ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), q.size(2), v.size(2)))
        return attention_tc_backward<T>(ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const T>(out),
                                        ptr<const T>(dout), ptr<const C>(lse), ptr<C>(d), ptr<T>(dq), ptr<T>(dk),
                                        ptr<T>(dv), params_of<C>(q, k, v, mask, p), scope.stream());
    }
    attention_backward<T, C>(ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const T>(out),
                             ptr<const T>(dout), ptr<const C>(lse), ptr<C>(d), ptr<T>(dq), ptr<T>(dk), ptr<T>(dv),
                             params_of<C>(q, k, v, mask, p), scope.stream());
  });
}

}  // namespace

void set_attention_variant(std::string_view name) { g_flash = parse_attention(name); }
std::string attention_last_forward() { return t_last_forward; }

std::string attention_variant() {
  switch (g_flash.load()) {
    case Flash::Simt: return "simt";
    case Flash::Decode: return "decode";
    default: return "auto";
  }
}

void register_attention() {
  attention_stub.set(DeviceType::CUDA, attention_kernel);
  attention_backward_stub.set(DeviceType::CUDA, attention_backward_kernel);
}

}  // namespace ember::kernels::cuda
