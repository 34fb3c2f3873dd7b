// libtorch's cpp/autograd: basic autograd operations, higher-order gradients and custom
// autograd functions, each printing what the original prints.
#include <iostream>

#include "examples/pytorch/common.h"
#include "examples/pytorch/cpp_autograd/model.h"

using ember::Tensor;
using namespace pt_cpp_autograd;

static void basic_autograd_operations_example() {
  std::cout << "====== Running: \"Basic autograd operations\" ======\n";
  Tensor x = ember::ones({2, 2}).requires_grad_();
  Tensor y = x + 2;
  std::cout << y << "\n" << y.grad_fn_name() << "\n";
  Tensor z = y * y * 3;
  Tensor out = z.mean();
  std::cout << z << "\n" << z.grad_fn_name() << "\n" << out << "\n" << out.grad_fn_name() << "\n";
  out.backward();
  std::cout << x.grad() << "\n";
  x = ember::randn({3}).requires_grad_();
  y = x * 2;
  while (y.norm().item<double>() < 1000) y = y * 2;
  std::cout << y << "\n" << y.grad_fn_name() << "\n";
  y.backward(ember::tensor({0.1, 1.0, 0.0001}));
  std::cout << x.grad() << "\n";
  {
    ember::NoGradGuard no_grad;
    std::cout << std::boolalpha << x.pow(2).requires_grad() << "\n";
  }
  y = x.detach();
  std::cout << y.requires_grad() << "\n" << x.eq(y).all().item<bool>() << "\n";
}

static void compute_higher_order_gradients_example() {
  std::cout << "====== Running \"Computing higher-order gradients in C++\" ======\n";
  nn::Linear model(4, 3);
  Tensor input = ember::randn({3, 4}).requires_grad_();
  Tensor target = ember::randn({3, 3});
  combined_loss(model, input, target).backward();
  std::cout << input.grad() << "\n";
}

static void custom_autograd_function_example() {
  std::cout << "====== Running \"Using custom autograd function in C++\" ======\n";
  {
    Tensor x = ember::randn({2, 3}).requires_grad_();
    Tensor weight = ember::randn({4, 3}).requires_grad_();
    linear_function(x, weight).sum().backward();
    std::cout << x.grad() << "\n" << weight.grad() << "\n";
  }
  {
    Tensor x = ember::randn({2}).requires_grad_();
    mul_constant(x, 5.5).sum().backward();
    std::cout << x.grad() << "\n";
  }
}

int main(int argc, char** argv) {
  return ember::run_program("ember_pt_cpp_autograd", [&] {
    CLI::App app{"libtorch's cpp/autograd in ember: autograd basics, a gradient penalty, custom functions"};
    app.failure_message(ember::cli_failure_message);
    ember::pt::Flags flags;
    ember::pt::add_flags(app, flags, /*with_data=*/false);
    CLI11_PARSE(app, argc, argv);
    ember::pt::setup(flags);
    if (flags.check_flags) return 0;
    basic_autograd_operations_example();
    std::cout << "\n";
    compute_higher_order_gradients_example();
    std::cout << "\n";
    custom_autograd_function_example();
    return 0;
  });
}
