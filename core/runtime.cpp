#include "core/runtime.h"

#include <atomic>
#include <cstdio>
#include <mutex>

#include "base/error.h"
#include "core/device_runtime.h"
#include "core/dispatch.h"
#include "core/random.h"

namespace ember {

void init() {
  static std::once_flag once;
  std::call_once(once, [] {
    kernels::register_cpu_kernels();
    kernels::register_cuda_kernels();
  });
}

int get_num_threads() { return kernels::cpu_num_threads(); }

void set_num_threads(int n) { kernels::set_cpu_num_threads(n); }

SingleThreadedScope::SingleThreadedScope() : saved_(kernels::cpu_thread_serial()) {
  kernels::set_cpu_thread_serial(true);
}
SingleThreadedScope::~SingleThreadedScope() { kernels::set_cpu_thread_serial(saved_); }

const char* cpu_vector_isa() { return kernels::cpu_vector_isa(); }

namespace {
std::atomic<bool> g_allow_tf32{false};
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

bool cuda_backend_built() { return kernels::cuda_backend_built(); }

std::string default_device_name() { return kernels::cuda_device_count() > 0 ? "cuda" : "cpu"; }

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace ember
