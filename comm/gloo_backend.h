// The Gloo backend: collectives on CPU tensors over TCP (Debian's libgloo). Only
// comm/gloo_backend.cpp includes Gloo's headers.
#pragma once

#include <memory>
#include <string>

#include "comm/process_group.h"

namespace ember::comm {

// Connects this rank to every other one (Gloo's full mesh, its addresses exchanged
// through `store`), then runs the collectives it is given, in order, on one worker thread.
// `hostname`: the address the other ranks reach this one at.
std::unique_ptr<Backend> make_gloo_backend(std::shared_ptr<Store> store, int rank, int size,
                                           const std::string& hostname, Duration timeout);

}  // namespace ember::comm
