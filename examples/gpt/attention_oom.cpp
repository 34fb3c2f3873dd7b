// The attention note of ember_gpt's out-of-memory reports (attention_oom.h).
#include "examples/gpt/attention_oom.h"

#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

namespace ember::examples::gpt {
namespace {

// EMBER_ATTENTION for the scope: the estimate of the other path.
class ScopedAttentionPath {
 public:
  explicit ScopedAttentionPath(const char* path) {
    if (const char* old = std::getenv("EMBER_ATTENTION")) saved_ = old;
    ::setenv("EMBER_ATTENTION", path, 1);
  }
  ~ScopedAttentionPath() {
    if (saved_) ::setenv("EMBER_ATTENTION", saved_->c_str(), 1);
    else ::unsetenv("EMBER_ATTENTION");
  }
  ScopedAttentionPath(const ScopedAttentionPath&) = delete;
  ScopedAttentionPath& operator=(const ScopedAttentionPath&) = delete;

 private:
  std::optional<std::string> saved_;
};

// The path scaled_dot_product_attention takes for the model's calls (Note [Attention path]
// in core/ops_attention.cpp): math when asked for, or when a head is wider than the CUDA
// kernels take; the fused kernels otherwise (causal, no additive mask, dropout below 1).
bool math_path(const AttentionOomContext& ctx) {
  const char* env = std::getenv("EMBER_ATTENTION");
  if (env && std::string_view(env) == "math") return true;
  return ctx.device.is_cuda() && ctx.model.n_embd / ctx.model.n_head > 256;
}

struct Fit {
  const AttentionOomContext& ctx;
  std::size_t cap;

  // The estimated step at context T on `path` ("math", "flash"; nullptr: the one in force).
  optim::MemoryEstimate step(int64_t T, const char* path) const {
    GPTConfig m = ctx.model;
    m.block_size = T;
    std::optional<ScopedAttentionPath> forced;
    if (path) forced.emplace(path);
    return estimate_step(*ctx.common, ctx.device, ctx.world, [m] { return std::make_shared<GPT>(m); }, {{T}, true},
                         ctx.batch);
  }
  // The step's room under the cap: what it leaves beyond what training started with, plus
  // the parameters (held then, and counted by the estimate). The cap bounds what the
  // allocator reserves, so the step's reserved peak is what must fit (its allocated peak
  // fitting is not enough: segments are whole and a split block's rest may serve nothing).
  bool fits(int64_t T, const char* path) const {
    const optim::MemoryEstimate e = step(T, path);
    const std::size_t room = (cap > ctx.held ? cap - ctx.held : 0) + static_cast<std::size_t>(e.parameters);
    return e.step_peak_reserved_bytes <= static_cast<int64_t>(room);
  }
  // The largest context up to `T` whose step fits (the footprint grows with T); 0: none.
  int64_t largest_context(int64_t T, const char* path) const {
    if (fits(T, path)) return T;
    if (!fits(1, path)) return 0;
    int64_t lo = 1, hi = T;
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (fits(mid, path) ? lo : hi) = mid;
    }
    return lo;
  }
};

std::string bytes(int64_t b) { return memory::format_bytes(static_cast<std::size_t>(b < 0 ? 0 : b)); }

std::string note(const memory::OomReport& r, const AttentionOomContext& ctx) {
  const GPTConfig& m = ctx.model;
  const int64_t T = m.block_size, B = ctx.batch, H = m.n_head;
  const Fit fit{ctx, r.cap};
  const bool math = math_path(ctx);
  // Reserved peaks (segments, parameters included): what the cap bounds, and what fits() compares.
  const int64_t here = fit.step(T, nullptr).step_peak_reserved_bytes;
  const std::string room = bytes(static_cast<int64_t>(r.cap > ctx.held ? r.cap - ctx.held : 0));
  std::ostringstream os;
  os << "attention: ";
  if (math) {
    const int64_t scores = B * H * T * T;
    const int64_t width = ctx.common->precision == "bf16" ? 2 : 4;
    const int64_t fused = fit.step(T, "flash").step_peak_reserved_bytes;
    os << "the math path ran (EMBER_ATTENTION=math): each of the " << m.n_layer
       << " layers makes B*H*T^2 = " << B << "*" << H << "*" << T << "^2 = " << scores << " scores ("
       << bytes(scores * width) << " a tensor) and keeps its probabilities for backward. By the memory estimate the "
       << "step reserves " << bytes(here) << " at --block-size " << T << ", " << bytes(fused)
       << " on the fused path (EMBER_ATTENTION unset or flash: one log-sum-exp per row, linear in T)";
    if (here - fused > here / 2) os << ": the attention's scores and probabilities are most of it";
    os << ". Under the cap (" << room << " for training) at --batch-size " << B * ctx.world << ", the math path fits ";
    const int64_t ctx_math = fit.largest_context(T, nullptr);
    if (ctx_math > 0) os << "--block-size " << ctx_math;
    else os << "no context";
    const int64_t ctx_fused = fit.largest_context(T, "flash");
    if (ctx_fused == T) os << "; the fused path fits --block-size " << T << " as it is.";
    else if (ctx_fused > 0) os << "; the fused path fits --block-size " << ctx_fused << ".";
    else os << "; the fused path fits no context either.";
  } else {
    os << "the fused path ran: each of the " << m.n_layer
       << " layers keeps its output and one log-sum-exp per row (B*H*T = " << B * H * T
       << " rows) and makes no T^2 scores, so the step grows linearly with the context: by the memory estimate it "
       << "reserves " << bytes(here) << " at --block-size " << T << ". Under the cap (" << room
       << " for training) at --batch-size " << B * ctx.world << ", ";
    const int64_t fits = fit.largest_context(T, nullptr);
    if (fits > 0) os << "--block-size " << fits << " fits.";
    else os << "no context fits.";
  }
  return os.str();
}

}  // namespace

OutOfMemoryError with_attention_note(const OutOfMemoryError& e, const AttentionOomContext& ctx) {
  memory::OomReport r = e.report();
  try {
    r.notes.push_back(note(r, ctx));
  } catch (const Error&) {
    return e;  // no estimate (a model the meta device cannot run): the report as it was
  }
  return OutOfMemoryError(std::move(r));
}

}  // namespace ember::examples::gpt
