// Peak memory of one attention training step against the sequence length: the math path
// (matmul, softmax, matmul: the B H T^2 scores and weights kept for backward) and the
// fused path (out and one log-sum-exp per row; the backward recomputes the weights by
// tiles), measured by ember's allocator statistics (every storage, CPU or CUDA, goes
// through it). The step: q, k, v [B, H, T, D] float32 leaves, causal attention, the sum
// of the output backward. The figure is the step's peak over what was allocated before it
// (q, k and v themselves), so it holds the output, the gradients and each path's working
// set. scripts/attention-memory.py runs it on the CPU and the emulated device and draws
// docs/attention-memory.svg.
//
//   ember_bench_attention_memory [--device cpu|cuda] [--heads H] [--dim D] [T ...]
//
// Prints one line per path and T: "path T peak_bytes" (a path that runs out of memory
// prints "oom" for the peak).
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "ember.h"

namespace {

int64_t step_peak(const char* path, ember::Device d, int64_t H, int64_t T, int64_t D) {
  using namespace ember;
  ::setenv("EMBER_ATTENTION", path, 1);
  const TensorOptions opts{kFloat32, d};
  Tensor q = randn({1, H, T, D}, opts), k = randn({1, H, T, D}, opts), v = randn({1, H, T, D}, opts);
  for (Tensor* t : {&q, &k, &v}) t->requires_grad_();
  synchronize(d);
  reset_peak_memory_stats(d);
  const int64_t before = memory_stats(d).at("allocated_bytes.all.current");
  sum(scaled_dot_product_attention(q, k, v, {.is_causal = true})).backward();
  synchronize(d);
  return memory_stats(d).at("allocated_bytes.all.peak") - before;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string device = "cpu";
    int64_t H = 4, D = 64;
    std::vector<int64_t> sizes;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help") {
        std::printf("usage: ember_bench_attention_memory [--device cpu|cuda] [--heads H] [--dim D] [T ...]\n");
        return 0;
      }
      if ((a == "--device" || a == "--heads" || a == "--dim") && i + 1 < argc) {
        const std::string value = argv[++i];
        if (a == "--device") device = value;
        else (a == "--heads" ? H : D) = std::stoll(value);
      } else {
        sizes.push_back(std::stoll(a));
      }
    }
    if (sizes.empty()) sizes = {256, 512, 1024, 2048, 4096};
    const ember::Device d = device == "cuda" ? ember::Device::cuda(0) : ember::Device::cpu();
    std::printf("# device %s, B 1, H %lld, D %lld, float32, causal; peak bytes of a forward + backward\n",
                d.str().c_str(), static_cast<long long>(H), static_cast<long long>(D));
    for (int64_t T : sizes)
      for (const char* path : {"math", "flash"}) {
        try {
          const int64_t peak = step_peak(path, d, H, T, D);
          std::printf("%s %lld %lld\n", path, static_cast<long long>(T), static_cast<long long>(peak));
        } catch (const ember::OutOfMemoryError&) {
          std::printf("%s %lld oom\n", path, static_cast<long long>(T));
        }
        std::fflush(stdout);
      }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember_bench_attention_memory: %s\n", e.what());
    return 1;
  }
}
