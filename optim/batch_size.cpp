#include "optim/batch_size.h"

#include "base/error.h"
#include "core/memory.h"

namespace ember::optim {

BatchSizeSearch find_max_batch(const std::function<void(int64_t)>& step, const std::vector<Tensor>& params,
                               Device device, int64_t max_batch, int64_t min_batch, int max_trials) {
  EMBER_CHECK(min_batch >= 1 && max_batch >= min_batch && max_trials >= 1, "find_max_batch: expected 1 <= min_batch (",
              min_batch, ") <= max_batch (", max_batch, ") and max_trials >= 1 (", max_trials, ")");
  BatchSizeSearch r;
  auto fits = [&](int64_t b) {
    bool ok = true;
    try {
      step(b);
    } catch (const OutOfMemoryError&) {
      ok = false;  // the step's tensors were freed as the exception unwound
    }
    for (const Tensor& p : params) p.set_grad({});
    ++r.trials;
    r.tried.emplace_back(b, ok);
    return ok;
  };
  int64_t good = 0, bad = 0;  // largest size that fit, smallest that did not (0: none yet)
  for (int64_t b = min_batch; r.trials < max_trials; b = std::min(2 * b, max_batch)) {
    if (fits(b)) {
      good = b;
      if (b == max_batch) break;
    } else {
      bad = b;
      break;
    }
  }
  while (good > 0 && bad > good + 1 && r.trials < max_trials) {
    const int64_t mid = good + (bad - good) / 2;
    (fits(mid) ? good : bad) = mid;
  }
  r.batch = good;
  empty_cache(device);
  return r;
}

}  // namespace ember::optim
