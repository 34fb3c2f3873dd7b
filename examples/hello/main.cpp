// The smallest ember program: make two tensors, multiply them, print the product and
// the backend that computed it.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <thread>

#include "base/program.h"
#include "ember.h"

int main(int argc, char** argv) {
  return ember::run_program("ember_hello", [&] {
    CLI::App app{"ember hello: multiply two small matrices and print the result"};
    app.failure_message(ember::cli_failure_message);
    std::string device = "auto";
    int threads = 0;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    app.add_option("--device", device, "auto, cpu, cuda or cuda:N")->capture_default_str();
    app.add_option("--threads", threads, "CPU threads, at most the cores (default: EMBER_NUM_THREADS or all cores)")
        ->check(CLI::Range(1, cores).description(""))
        ->type_name("INT in [1, " + std::to_string(cores) + "]");
    CLI11_PARSE(app, argc, argv);

    if (threads > 0) ember::set_num_threads(threads);
    if (device == "auto") {
      device = ember::default_device_name();
      if (device == "cpu") std::printf("no CUDA device found: running on the cpu\n");
    }
    ember::Device dev = ember::Device::parse(device);
    EMBER_CHECK(dev.is_cpu(), "hello: the CUDA backend has no kernels yet; use --device cpu");

    ember::manual_seed(0);
    ember::Tensor a = ember::arange(0, 6, 1).view({2, 3});
    ember::Tensor b = ember::randn({3, 2});
    ember::Tensor c = ember::matmul(a, b);
    std::cout << "a =\n" << a << "\nb =\n" << b << "\na @ b =\n" << c << "\n";
    std::printf("backend: %s, %d thread(s), CUDA backend %s, %d CUDA device(s)\n", dev.str().c_str(),
                ember::get_num_threads(), ember::cuda_backend_built() ? "built" : "not built",
                ember::cuda_device_count());
    return 0;
  });
}
