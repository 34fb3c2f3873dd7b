// The CUDA backend's registration functions, one per source file, called in order by
// register_cuda_kernels() (backend.cu).
#pragma once

#include "core/dispatch.h"

namespace ember::kernels::cuda {

void register_copy();
void register_elementwise();
void register_random();
void register_reduce();
void register_softmax();
void register_index();
void register_matmul();
void register_conv();
void register_pool();
void register_optim();
void register_fused();
void register_sparse();
void register_attention();
void register_rnn();
void register_vision();

}  // namespace ember::kernels::cuda
