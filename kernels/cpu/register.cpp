#include "core/dispatch.h"
#include "kernels/cpu/cpu_kernels.h"

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
}

}  // namespace ember::kernels
