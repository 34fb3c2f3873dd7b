// A model file written against an installed ember, as a user writes one: <ember/ember.h>
// with -I<prefix>/include only, options spelled with designated initializers (the README's
// way, members left out included), built under -Wall -Wextra -Wpedantic -Werror (run.sh
// compiles it with CMake and with a plain compiler line). It multiplies two matrices,
// trains a small CNN a few steps on a TensorDataset and an MLP on a map-style dataset,
// and checks the results. Exits 0 on success, 1 with a message otherwise.
#include <ember/data/dataset.h>
#include <ember/ember.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <vector>

using namespace ember;

namespace {

bool fail(const char* what) {
  std::fprintf(stderr, "consumer: %s\n", what);
  return false;
}

bool matmul_works() {
  // [2, 3] @ [3, 2] = [[58, 64], [139, 154]]
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = tensor({7, 8, 9, 10, 11, 12}, {3, 2});
  Tensor c = a.matmul(b);
  if (c.shape() != Shape{2, 2}) return fail("matmul gave the wrong shape");
  if (c.to_vector<double>() != std::vector<double>{58, 64, 139, 154}) return fail("matmul gave wrong values");
  try {  // errors cross the library boundary as ember::Error
    matmul(a, a);
    return fail("matmul of [2, 3] by [2, 3] did not throw ember::Error");
  } catch (const Error&) {
  }
  std::printf("consumer: matmul ok, %s\n", c.str().c_str());
  return true;
}

class Net : public nn::Callable<Net> {
 public:
  Net() {
    features = register_module("features", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(1, 4, nn::Pair{3, 3}, nn::Pair{1, 1}, nn::Pair{1, 1}), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::MaxPool2d>(Pool2dOptions{.kernel_size = {2, 2}}), std::make_shared<nn::Flatten>()}));
    head = register_module("head", std::make_shared<nn::Linear>(4 * 4 * 4, 3));
    apply([](nn::Module& m) {
      if (auto* conv = dynamic_cast<nn::Conv2d*>(&m)) {
        nn::init::kaiming_normal_(conv->weight, {.mode = nn::init::FanMode::FanOut,
                                                 .nonlinearity = nn::init::Nonlinearity::ReLU});
        nn::init::zeros_(conv->bias);
      }
    });
  }
  Tensor forward(const Tensor& x) { return (*head)((*features)(x)); }
  std::shared_ptr<nn::Sequential> features;
  std::shared_ptr<nn::Linear> head;
};

bool cnn_trains() {
  manual_seed(0);
  const int64_t n = 48;
  Tensor images = randn({n, 1, 8, 8});
  Tensor labels = randint(0, 3, {n});
  data::DataLoader loader(data::TensorDataset(images, labels), {.batch_size = 16, .seed = 1});
  auto model = std::make_shared<Net>();
  optim::Adam opt(model->parameters(), optim::Adam::Options{.lr = 1e-2});
  nn::CrossEntropyLoss criterion({.label_smoothing = 0.1});
  double first = 0, last = 0;
  for (int epoch = 0; epoch < 8; ++epoch) {
    double total = 0;
    for (auto& batch : loader) {
      Tensor loss = criterion((*model)(batch.data), batch.target);
      opt.zero_grad();
      loss.backward();
      opt.step();
      total += loss.item<double>();
    }
    if (epoch == 0) first = total;
    last = total;
  }
  std::printf("consumer: CNN loss over an epoch %.4f -> %.4f\n", first, last);
  if (!std::isfinite(last) || !(last < first)) return fail("the CNN's loss did not fall");
  return true;
}

struct Point {
  Tensor x;
  double y;
};
class Line : public data::Dataset<Point> {
 public:
  Point get(int64_t i) const override {
    const double t = static_cast<double>(i) / 10;
    return {tensor(std::vector<double>{t}, Shape{1}), 3 * t - 1};
  }
  int64_t size() const override { return 20; }
};
struct XY {
  Tensor x, y;
};

bool regression_trains() {
  manual_seed(1);
  auto collate = [](std::vector<Point> points) {
    std::vector<Tensor> xs;
    std::vector<double> ys;
    for (const Point& p : points) {
      xs.push_back(p.x);
      ys.push_back(p.y);
    }
    return XY{stack(xs), tensor(ys, {static_cast<int64_t>(ys.size()), 1})};
  };
  data::BasicDataLoader loader(std::make_shared<Line>(), collate, {.batch_size = 5, .seed = 2});
  nn::Linear fit(1, 1);
  optim::SGD opt(fit.parameters(), {.lr = 0.2});
  nn::MSELoss mse;
  for (int epoch = 0; epoch < 200; ++epoch) {
    for (auto& batch : loader) {
      Tensor loss = mse(fit(batch.x), batch.y);
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
  }
  const double w = fit.weight.item<double>(), b = fit.bias.item<double>();
  std::printf("consumer: fitted y = %.3f x + %.3f (want 3 x - 1)\n", w, b);
  if (std::fabs(w - 3) > 1e-2 || std::fabs(b + 1) > 1e-2) return fail("the regression did not fit y = 3x - 1");
  return true;
}

}  // namespace

int main() {
  try {
    const bool ok = matmul_works() && cnn_trains() && regression_trains();
    if (ok) std::printf("consumer: ok\n");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
