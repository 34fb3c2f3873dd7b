// Batches on the training device, one step ahead: while the current step runs, the next
// batch is already being copied to the device on a stream of its own (PyTorch's
// data_prefetcher pattern). On the CPU it hands the loader's batches through.
//
//   data::DataLoader loader(train, {.batch_size = 128, .pin_memory = true});
//   data::DevicePrefetcher batches(loader, Device::cuda());
//   batches.start_epoch(e);
//   while (auto batch = batches.next()) { ... }   // batch->data is on cuda:0
#pragma once

#include <optional>

#include "core/stream.h"
#include "data/dataset.h"

namespace ember::data {

class DevicePrefetcher {
 public:
  DevicePrefetcher(DataLoader& loader, Device device);

  void start_epoch(int64_t epoch);
  // The next batch, on the device and ready for the current stream's work; the copy of
  // the one after it is queued before this returns.
  std::optional<Batch> next();

 private:
  void fetch();

  DataLoader& loader_;
  Device device_;
  std::optional<Stream> copy_stream_;  // CUDA devices only
  std::optional<Batch> pending_;
  std::optional<Event> copied_;  // recorded on copy_stream_ after pending_'s copy
};

}  // namespace ember::data
