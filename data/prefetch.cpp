#include "data/prefetch.h"

#include <utility>

namespace ember::data {

DevicePrefetcher::DevicePrefetcher(DataLoader& loader, Device device) : loader_(loader), device_(device) {
  if (device.is_cuda()) copy_stream_ = Stream::create(device);
}

void DevicePrefetcher::start_epoch(int64_t epoch) {
  loader_.start_epoch(epoch);
  pending_.reset();
  if (device_.is_cuda()) fetch();
}

void DevicePrefetcher::fetch() {
  std::optional<Batch> host = loader_.next();
  if (!host) {
    pending_.reset();
    return;
  }
  // The copies, and the device memory they fill, belong to the copy stream; unpinned
  // batches make them synchronous, but still correct.
  StreamGuard on_copy_stream(*copy_stream_);
  pending_ = Batch{host->data.to(device_, /*non_blocking=*/true), host->target.to(device_, /*non_blocking=*/true)};
  copied_.emplace(device_);
  copied_->record(*copy_stream_);
}

std::optional<Batch> DevicePrefetcher::next() {
  if (!device_.is_cuda()) {
    std::optional<Batch> b = loader_.next();
    if (b && !(b->data.device() == device_)) b = Batch{b->data.to(device_), b->target.to(device_)};
    return b;
  }
  if (!pending_) return std::nullopt;
  const Stream compute = Stream::current(device_);
  compute.wait(*copied_);
  // Made on the copy stream, used on the compute stream: not reused until that is done.
  pending_->data.record_stream(compute);
  pending_->target.record_stream(compute);
  std::optional<Batch> out = std::move(pending_);
  fetch();
  return out;
}

}  // namespace ember::data
