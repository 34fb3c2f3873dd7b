// The ports of PyTorch's examples (examples/pytorch) as programs: each trains one batch and
// tests one (the originals' --dry-run) on the CPU at a small size, and exits 0 having
// printed what its original prints last. Their numerics are tests/pytorch's.
#include <gtest/gtest.h>

#include <string>

#include "tests/examples/run_util.h"

#ifndef EMBER_PT_BIN_DIR
#define EMBER_PT_BIN_DIR "build/examples"
#endif

namespace ember::test {
namespace {

struct Port {
  const char* name;
  const char* flags;
  const char* expect;  // in the output
};

const Port kPorts[] = {
    {"regression", "--dry-run", "==> Actual function:"},
    {"cpp_autograd", "", "Using custom autograd function"},
    {"mnist", "--dry-run --epochs 1 --limit-train 64 --limit-test 100", "Test set: Average loss"},
    {"mnist_rnn", "--dry-run --epochs 1 --limit-train 64 --limit-test 100", "Test set: Average loss"},
    {"vae", "--dry-run --epochs 1 --limit-train 64 --limit-test 64", "Test set loss"},
    {"vision_transformer",
     "--dry-run --epochs 1 --img-size 28 --patch-size 7 --latent-size 16 --num-heads 2 --num-encoders 1 --limit-train 8 --limit-test 8",
     "EPOCH[VALID]1/1"},
    {"word_language_model", "--dry-run --epochs 1 --emsize 16 --nhid 16 --nlayers 1", "End of training"},
    {"word_language_model", "--dry-run --epochs 1 --emsize 16 --nhid 16 --nlayers 1 --model Transformer", "End of training"},
    {"word_language_model", "--dry-run --epochs 1 --emsize 16 --nhid 16 --nlayers 2 --model GRU --tied", "End of training"},
    {"time_sequence_prediction", "--dry-run --waves 6 --length 50", "test loss:"},
    {"imagenet", "--dry-run --epochs 1 --image-size 32 --batch-size 4 --limit-train 8 --limit-test 8", "Acc@1"},
    {"siamese_network", "--dry-run --epochs 1 --batch-size 4 --limit-train 8 --limit-test 8", "Test set: Average loss"},
    {"cpp_mnist", "--dry-run --epochs 1 --limit-train 64 --limit-test 100", "Test set: Average loss"},
    {"dcgan", "--dry-run --epochs 1 --batch-size 4 --nz 16 --ngf 8 --ndf 8 --limit-train 8", "Loss_D:"},
    {"cpp_dcgan", "--dry-run --epochs 1 --batch-size 4 --limit-train 8", "Training complete!"},
    {"super_resolution", "--dry-run --epochs 1 --batch-size 4 --limit-train 8 --limit-test 10", "===> Avg. PSNR:"},
};

TEST(PyTorchPorts, EachTrainsABatch) {
  for (const Port& p : kPorts) {
    SCOPED_TRACE(p.name);
    const auto [out, status] =
        run(std::string(EMBER_PT_BIN_DIR) + "/ember_pt_" + p.name + " --device cpu --threads 1 " + p.flags + " 2>&1");
    EXPECT_EQ(status, 0) << out;
    EXPECT_NE(out.find(p.expect), std::string::npos) << out;
  }
}

TEST(PyTorchPorts, HelpListsTheHouseFlags) {
  for (const Port& p : kPorts) {
    SCOPED_TRACE(p.name);
    const auto [out, status] = run(std::string(EMBER_PT_BIN_DIR) + "/ember_pt_" + p.name + " --help");
    EXPECT_EQ(status, 0);
    for (const char* flag : {"--device", "--threads", "--seed", "--epochs", "--lr", "--dry-run"})
      EXPECT_NE(out.find(flag), std::string::npos) << flag;
  }
}

}  // namespace
}  // namespace ember::test
