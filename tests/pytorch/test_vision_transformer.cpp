// examples/pytorch/vision_transformer against its PyTorch twin (vision_transformer_twin.py):
// the ViT at a reduced size (the twin's config), dropout 0, 3 steps of Adam with weight decay.
#include "examples/pytorch/vision_transformer/model.h"
#include "tests/pytorch/twin_steps.h"

namespace ember::test {
namespace {

TEST(PyTorchTwin, VisionTransformer) {
  const twin::Twin t = twin::load("vision_transformer");
  const auto& c = t.config;
  pt_vit::Args args;
  args.patch_size = c.at("patch_size");
  args.latent_size = c.at("latent_size");
  args.n_channels = c.at("n_channels");
  args.num_heads = c.at("num_heads");
  args.num_encoders = c.at("num_encoders");
  args.dropout = c.at("dropout");
  args.num_classes = c.at("num_classes");
  args.batch_size = c.at("batch_size");
  auto model = std::make_shared<pt_vit::ViT>(args);
  t.init_module(*model);
  optim::Adam optimizer(model->parameters(), {.lr = c.at("lr").get<double>(), .weight_decay = c.at("weight_decay").get<double>()});
  nn::CrossEntropyLoss criterion;
  for (int64_t step = 0; step < t.steps(); ++step) {
    const std::string s = "step" + std::to_string(step);
    optimizer.zero_grad();
    Tensor loss = criterion((*model)(t.at(s + ".images")), t.at(s + ".labels"));
    t.check_loss(step, loss);
    loss.backward();
    optimizer.step();
  }
  t.check_final(*model);
}

}  // namespace
}  // namespace ember::test
