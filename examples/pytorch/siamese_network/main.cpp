// pytorch/examples' siamese_network/main.py on Fashion-MNIST: APP_MATCHER's pairs (even
// indices two different images of one class, target 1; odd ones images of two classes,
// target 0; pixels in [0, 255] as the original's), Adadelta (lr 1.0) with StepLR(1, 0.7),
// binary cross entropy; the test set's loss and accuracy after each epoch.
#include <cstdio>
#include <mutex>
#include <random>

#include "examples/pytorch/common.h"
#include "examples/pytorch/siamese_network/model.h"

using ember::Tensor;

namespace {

struct PairSample {
  Tensor image_1, image_2, target;
};
struct PairBatch {
  Tensor images_1, images_2, targets;
};

// APP_MATCHER: a map-style dataset of image pairs.
class AppMatcher : public ember::data::Dataset<PairSample> {
 public:
  AppMatcher(const ember::data::TensorDataset& d, uint64_t seed) : data_(d.data() * 255.0), rng_(seed) {
    const std::vector<int64_t> targets = d.targets().to_vector<int64_t>();
    for (size_t i = 0; i < targets.size(); ++i) grouped_examples_[targets[i]].push_back(static_cast<int64_t>(i));
    // The original draws among all 10 classes; a set cut by --limit-train may lack some, so
    // the first image's class is one with two images at least, the other one with any.
    for (int64_t c = 0; c < 10; ++c) {
      if (grouped_examples_[c].size() >= 2) pair_classes_.push_back(c);
      if (!grouped_examples_[c].empty()) classes_.push_back(c);
    }
    EMBER_CHECK(!pair_classes_.empty() && classes_.size() >= 2,
                "siamese_network: the images must hold two classes, one of them twice (use a larger --limit-train/--limit-test)");
  }
  int64_t size() const override { return data_.size(0); }
  PairSample get(int64_t index) const override {
    const std::lock_guard<std::mutex> lock(mu_);
    const int64_t selected_class = pair_classes_[randint(0, static_cast<int64_t>(pair_classes_.size()) - 1)];
    const auto& group = grouped_examples_[selected_class];
    const int64_t random_index_1 = randint(0, static_cast<int64_t>(group.size()) - 1);
    const Tensor image_1 = data_.select(0, group[random_index_1]);
    if (index % 2 == 0) {
      int64_t random_index_2 = randint(0, static_cast<int64_t>(group.size()) - 1);
      while (random_index_2 == random_index_1) random_index_2 = randint(0, static_cast<int64_t>(group.size()) - 1);
      return {image_1, data_.select(0, group[random_index_2]), ember::tensor({1.0})};
    }
    const auto draw_class = [&] { return classes_[randint(0, static_cast<int64_t>(classes_.size()) - 1)]; };
    int64_t other_selected_class = draw_class();
    while (other_selected_class == selected_class) other_selected_class = draw_class();
    const auto& other = grouped_examples_[other_selected_class];
    return {image_1, data_.select(0, other[randint(0, static_cast<int64_t>(other.size()) - 1)]), ember::tensor({0.0})};
  }

 private:
  int64_t randint(int64_t lo, int64_t hi) const { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  Tensor data_;
  std::vector<int64_t> grouped_examples_[10];
  std::vector<int64_t> pair_classes_, classes_;
  mutable std::mt19937_64 rng_;
  mutable std::mutex mu_;
};

PairBatch collate(std::vector<PairSample> samples) {
  std::vector<Tensor> a, b, t;
  for (auto& s : samples) a.push_back(s.image_1), b.push_back(s.image_2), t.push_back(s.target);
  return {ember::stack(a), ember::stack(b), ember::cat(t)};
}

}  // namespace

int main(int argc, char** argv) {
  return ember::run_program("ember_pt_siamese_network", [&] {
    CLI::App app{"pytorch/examples' siamese_network in ember: are two Fashion-MNIST images of one class?"};
    app.failure_message(ember::cli_failure_message);
    ember::pt::Flags flags;
    flags.epochs = 14;
    flags.lr = 1.0;
    double gamma = 0.7;
    ember::pt::add_flags(app, flags);
    app.add_option("--gamma", gamma, "learning rate step gamma")->check(ember::pt::finite_range(0.0, 1.0))->type_name("FLOAT in [0, 1]")->capture_default_str();
    CLI11_PARSE(app, argc, argv);
    const ember::Device device = ember::pt::setup(flags);
    if (flags.check_flags) return 0;

    ember::data::BasicDataLoader train_loader(std::make_shared<AppMatcher>(ember::pt::fashion_mnist(flags, true), flags.seed), collate,
                                              {.batch_size = flags.batch_size, .shuffle = true, .seed = flags.seed});
    ember::data::BasicDataLoader test_loader(std::make_shared<AppMatcher>(ember::pt::fashion_mnist(flags, false), flags.seed + 1), collate,
                                             {.batch_size = 1000, .shuffle = false});
    auto model = std::make_shared<pt_siamese_network::SiameseNetwork>();
    model->to(device);
    ember::optim::Adadelta optimizer(model->parameters(), {.lr = flags.lr});
    ember::optim::StepLR scheduler(optimizer, 1, gamma);
    ember::nn::BCELoss criterion;
    for (int64_t epoch = 1; epoch <= flags.epochs; ++epoch) {
      model->train();
      int64_t batch_idx = 0;
      for (const auto& batch : train_loader) {
        optimizer.zero_grad();
        const Tensor outputs = (*model)(batch.images_1.to(device), batch.images_2.to(device)).squeeze();
        Tensor loss = criterion(outputs, batch.targets.to(device));
        loss.backward();
        optimizer.step();
        if (batch_idx++ % 10 == 0) std::printf("Train Epoch: %lld [batch %lld]\tLoss: %.6f\n", static_cast<long long>(epoch), static_cast<long long>(batch_idx - 1), loss.item<double>());
        if (flags.dry_run) break;
      }
      model->eval();
      double test_loss = 0;
      int64_t correct = 0, seen = 0;
      {
        ember::NoGradGuard no_grad;
        for (const auto& batch : test_loader) {
          const Tensor targets = batch.targets.to(device);
          const Tensor outputs = (*model)(batch.images_1.to(device), batch.images_2.to(device)).squeeze();
          test_loss += ember::nn::BCELoss({.reduction = ember::Reduction::Sum})(outputs, targets).item<double>();
          correct += outputs.gt(0.5).eq(targets.gt(0.5)).sum().item<int64_t>();
          seen += targets.numel();
          if (flags.dry_run) break;
        }
      }
      std::printf("Test set: Average loss: %.4f, Accuracy: %lld/%lld (%.0f%%)\n", test_loss / seen, static_cast<long long>(correct),
                  static_cast<long long>(seen), 100.0 * correct / seen);
      scheduler.step();
    }
    return 0;
  });
}
