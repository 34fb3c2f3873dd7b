// The CPU backend's registration functions, one per source file, called in order by
// register_cpu_kernels() (register.cpp).
#pragma once

#include "core/dispatch.h"

namespace ember::kernels::cpu {

void register_elementwise();
void register_creation();
void register_reduce();
void register_matmul();
void register_softmax();
void register_indexing();
void register_conv();
void register_pool();
void register_optim();
void register_norm();
void register_fused_nn();
void register_sparse();
void register_attention();
void register_rnn();
void register_upsample();

}  // namespace ember::kernels::cpu
