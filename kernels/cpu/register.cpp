#include "core/device_runtime.h"
#include "core/dispatch.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/variant.h"
#include "kernels/cpu/vec.h"

namespace ember::kernels {

void register_cpu_kernels() {
  cpu::register_elementwise();
  cpu::register_creation();
  cpu::register_reduce();
  cpu::register_matmul();
  cpu::register_softmax();
  cpu::register_indexing();
  cpu::register_conv();
  cpu::register_pool();
  cpu::register_optim();
  cpu::register_norm();
  cpu::register_fused_nn();
  cpu::register_sparse();
  cpu::register_attention();
  cpu::register_rnn();
  cpu::register_upsample();
  // Every backend's variant variables were read at load time; a bad one is refused here.
  cpu::check_variant_environment();
}

const char* cpu_vector_isa() {
#if defined(__AVX512F__)
  return "avx512";
#elif EMBER_CPU_VEC
  return "avx2";
#else
  return "scalar";
#endif
}

}  // namespace ember::kernels
