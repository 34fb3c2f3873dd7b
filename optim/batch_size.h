// The largest batch whose training step fits in the device's memory (under its cap).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace ember::optim {

struct BatchSizeSearch {
  int64_t batch = 0;   // the largest batch that fit (0: not even `min_batch`)
  int trials = 0;      // steps tried
  std::vector<std::pair<int64_t, bool>> tried;  // (batch, fit) in the order tried
};

// Runs `step(batch)` -- one forward and backward of that many samples, no optimizer
// update -- for sizes from `min_batch` doubling up to `max_batch`, then bisects between
// the largest that fit and the smallest that ran out, trying at most `max_trials` sizes.
// A size fits when its step raises no OutOfMemoryError. Between trials the gradients of
// `params` are cleared, and at the end the device's cache is emptied: the search leaves
// nothing allocated that was not allocated before it.
BatchSizeSearch find_max_batch(const std::function<void(int64_t batch)>& step, const std::vector<Tensor>& params,
                               Device device, int64_t max_batch, int64_t min_batch = 1, int max_trials = 24);

}  // namespace ember::optim
