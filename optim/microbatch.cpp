#include "optim/microbatch.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "base/error.h"
#include "core/memory.h"
#include "core/ops.h"
#include "memory/site.h"

namespace ember::optim {

MicroBatcher::MicroBatcher(std::vector<Tensor> params, Device device, MicroBatchOptions options)
    : params_(std::move(params)), device_(device), options_(std::move(options)) {
  EMBER_CHECK(options_.safety > 0 && options_.safety <= 1, "MicroBatcher: safety must be in (0, 1], got ",
              options_.safety);
}

void MicroBatcher::clear_grads() {
  for (const Tensor& p : params_) p.set_grad({});
}

MicroBatchResult MicroBatcher::backward(const Tensor& data, const Tensor& target, const LossFn& loss) {
  EMBER_CHECK(data.dim() >= 1 && target.dim() >= 1 && data.size(0) == target.size(0),
              "MicroBatcher: data and target must share their first dim, got ", shape_str(data.shape()), " and ",
              shape_str(target.shape()));
  const int64_t N = data.size(0);
  EMBER_CHECK(N > 0, "MicroBatcher: the batch is empty");
  memory::CachingAllocator& allocator = device_allocator(device_);
  MicroBatchResult r;
  int64_t mb = micro_batch_ > 0 ? std::min(micro_batch_, N) : N;
  for (;;) {
    clear_grads();
    if (options_.on_attempt) options_.on_attempt();
    std::optional<OutOfMemoryError> failure;
    int64_t proposal = mb;
    double loss_sum = 0;
    int64_t pieces = 0;
    try {
      for (int64_t s = 0; s < N; s += mb) {
        const int64_t n = std::min(mb, N - s);
        const memory::StepScope step(n, static_cast<std::size_t>(allocator.stats().allocated_bytes[memory::kAllPools].current));
        Tensor l = loss(data.narrow(0, s, n), target.narrow(0, s, n));
        EMBER_CHECK(l.numel() == 1, "MicroBatcher: the loss must be one value, got ", shape_str(l.shape()));
        loss_sum += l.item<double>() * static_cast<double>(n);
        // The piece's mean, weighted by its share: the pieces' gradients add up to the
        // gradient of the batch's mean.
        (n == N ? l : mul(l, Scalar(static_cast<double>(n) / static_cast<double>(N)))).backward();
        ++pieces;
      }
    } catch (const OutOfMemoryError& e) {
      failure = e;
      // An estimate of at least the failed size says nothing (the piece ran out too early
      // to show its footprint): halve then.
      const int64_t fits = e.report().batch_that_fits;
      proposal = fits > 0 && fits < mb ? static_cast<int64_t>(std::floor(static_cast<double>(fits) * options_.safety))
                                       : mb / 2;
      // 0: even one sample does not fit, and every rank must stop.
      proposal = mb == 1 ? 0 : std::clamp<int64_t>(proposal, 1, mb - 1);
    }
    const int64_t agreed = options_.agree ? options_.agree(proposal) : proposal;
    EMBER_CHECK(agreed >= 0 && agreed <= proposal, "MicroBatcher: agree() returned ", agreed,
                " for this rank's proposal ", proposal, " (it must return the smallest proposal)");
    if (agreed == 0) {
      clear_grads();
      if (failure) throw *failure;
      EMBER_FAIL("MicroBatcher: another rank ran out of memory with one-sample micro-batches");
    }
    if (!failure && agreed == mb) {
      micro_batch_ = mb;
      r.loss = loss_sum / static_cast<double>(N);
      r.micro_batch = mb;
      r.pieces = pieces;
      return r;
    }
    // This rank or another ran out: the next attempt starts from cleared gradients, in
    // smaller pieces.
    mb = agreed;
    ++r.retries;
  }
}

}  // namespace ember::optim
