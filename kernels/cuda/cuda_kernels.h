// The CUDA backend's registration functions, one per source file, called in order by
// register_cuda_kernels() (backend.cu).
#pragma once

#include "core/dispatch.h"

namespace ember::kernels::cuda {

void register_copy();
void register_fused();

}  // namespace ember::kernels::cuda
