// The NCCL backend: collectives on CUDA tensors, on GPUs (libnccl) or on the emulated
// device (kernels/emu/nccl.cpp, the same API). Only comm/nccl_backend.cpp includes nccl.h;
// this header is compiled only where EMBER_COMM_NCCL is set (comm/CMakeLists.txt).
#pragma once

#include <memory>
#include <string>

#include "comm/process_group.h"

namespace ember::comm {

// Creates one NCCL communicator per CUDA device, at the first collective on that device
// (the same collective on every rank, so every rank makes it at the same point), with its
// own communication stream; Note [NCCL backend] in nccl_backend.cpp.
std::unique_ptr<Backend> make_nccl_backend(std::shared_ptr<Store> store, int rank, int size, Duration timeout);

// The bootstrap up to the communicator: every rank announces itself under `key` and waits
// for the others (a rank missing after `timeout` is an ember::Error naming it); rank 0
// makes an NCCL unique id (no device needed) and publishes it; every rank returns its
// bytes. Apart from the backend so CI tests it on machines without a GPU.
std::string exchange_nccl_unique_id(Store& store, const std::string& key, int rank, int size, Duration timeout);

}  // namespace ember::comm
