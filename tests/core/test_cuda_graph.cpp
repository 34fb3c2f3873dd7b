// CUDA graphs (core/cuda_graph.h): captured ops replay what eager execution computes, bit
// for bit, after new values are written into the static inputs; the capture's memory is
// the graph's while it lives and comes back with reset(); what waits for the device is an
// error in a capture. They need a CUDA device: in CI the emulated one, whose streams run
// on worker threads and whose captures follow CUDA's rules, so a capture that would break
// on a GPU breaks here. Without a device they skip, except the CPU errors.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "core/device_runtime.h"
#include "reference.h"
#include "ember.h"

namespace ember {
namespace {

#define NEED_CUDA()                                                                                   \
  do {                                                                                                \
    if (cuda_device_count() < 1) GTEST_SKIP() << "needs a CUDA device (emulated: EMBER_CUDA=EMULATED)"; \
  } while (0)

constexpr Device kCuda = Device::cuda();

std::vector<float> host(const Tensor& t) { return t.to_vector<float>(); }

// Elementwise ops, a linear layer and a matmul, and reductions over the static `x`.
struct SmallNet {
  Tensor w1 = randn({24, 17}, {kFloat32, kCuda}), b1 = randn({24}, {kFloat32, kCuda});
  Tensor w2 = randn({24, 5}, {kFloat32, kCuda});
  Tensor operator()(const Tensor& x) const {
    const Tensor h = linear(x, w1, b1, Activation::kReLU);
    const Tensor z = matmul(tanh(h) * h + 0.5, w2);
    return sum(z * z, {1}) + mean(exp(z * 0.1));
  }
};

TEST(CudaGraph, ReplaysOpsAsEagerExecutionDoesAfterNewInputsAreCopiedIn) {
  NEED_CUDA();
  manual_seed(1);
  const SmallNet net;
  const Tensor x = randn({33, 17}, {kFloat32, kCuda});
  (void)net(x);  // warm-up: workspaces and lazy state before the capture, as with PyTorch
  CudaGraph graph;
  Tensor out;
  {
    CudaGraphCapture capture(graph);
    EXPECT_TRUE(is_current_stream_capturing(kCuda));
    out = net(x);
  }
  EXPECT_TRUE(graph.captured());
  EXPECT_FALSE(is_current_stream_capturing(kCuda));
  EXPECT_EQ(Stream::current(kCuda), Stream::compute(kCuda)) << "the caller's stream is current again";
  for (int step = 0; step < 5; ++step) {
    x.copy_(randn({33, 17}, {kFloat32, kCuda}));
    graph.replay();
    const std::vector<float> replayed = host(out);
    EXPECT_EQ(replayed, host(net(x))) << "step " << step;
  }
  // Many replays queued back to back, with no host wait between them.
  const std::vector<float> once = host(out);
  for (int i = 0; i < 50; ++i) graph.replay();
  EXPECT_EQ(host(out), once);
}

TEST(CudaGraph, TheCapturesMemoryIsNotHandedToEagerWorkWhileTheGraphLives) {
  NEED_CUDA();
  manual_seed(2);
  const SmallNet net;
  const Tensor x = randn({33, 17}, {kFloat32, kCuda});
  (void)net(x);
  CudaGraph graph;
  Tensor out;
  {
    CudaGraphCapture capture(graph);
    out = net(x);  // its intermediates are freed during the capture: the graph's still
  }
  std::vector<std::pair<std::size_t, std::size_t>> pool;  // the graph's segments
  for (const memory::SegmentInfo& s : memory_snapshot(kCuda).segments)
    if (s.private_pool != 0) pool.emplace_back(s.address, s.address + s.size);
  ASSERT_FALSE(pool.empty());
  // Eager tensors of the intermediates' sizes, poisoned; the graph must not write them.
  std::vector<Tensor> poison;
  for (const Shape& s : {Shape{33, 24}, Shape{33, 24}, Shape{33, 5}, Shape{33, 5}, Shape{33}, Shape{1}})
    for (int i = 0; i < 4; ++i) poison.push_back(full(s, NAN, {kFloat32, kCuda}));
  for (const Tensor& p : poison) {
    const auto a = reinterpret_cast<std::size_t>(p.data_ptr());
    for (const auto& [lo, hi] : pool) EXPECT_FALSE(a >= lo && a < hi) << "an eager tensor in the graph's pool";
  }
  x.copy_(randn({33, 17}, {kFloat32, kCuda}));
  graph.replay();
  EXPECT_EQ(host(out), host(net(x)));
  for (const Tensor& p : poison)
    for (float v : host(p)) ASSERT_TRUE(std::isnan(v)) << "the graph wrote into eager memory";
}

TEST(CudaGraph, ForwardAndBackwardOfAnMlpGiveEagerGradients) {
  NEED_CUDA();
  manual_seed(3);
  nn::Sequential model({std::make_shared<nn::Linear>(20, 32), std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::Linear>(32, 5)});
  model.to(kCuda);
  const nn::CrossEntropyLoss criterion;
  const Tensor x = randn({16, 20}, {kFloat32, kCuda});
  const Tensor y = randint(0, 5, {16}, {kInt64, kCuda});
  criterion(model(x), y).backward();  // warm-up; it also makes the .grad tensors the graph accumulates into
  std::vector<const void*> grad_addresses;
  for (const Tensor& p : model.parameters()) grad_addresses.push_back(p.grad().data_ptr());

  CudaGraph graph;
  Tensor loss;
  {
    CudaGraphCapture capture(graph);
    for (const Tensor& p : model.parameters()) p.grad().zero_();
    loss = criterion(model(x), y);
    loss.backward();
  }
  for (int step = 0; step < 3; ++step) {
    x.copy_(randn({16, 20}, {kFloat32, kCuda}));
    y.copy_(randint(0, 5, {16}, {kInt64, kCuda}));
    graph.replay();
    std::vector<std::vector<float>> replayed;
    for (const Tensor& p : model.parameters()) replayed.push_back(host(p.grad()));
    const std::vector<float> replayed_loss = host(loss);

    for (const Tensor& p : model.parameters()) p.grad().zero_();
    const Tensor eager_loss = criterion(model(x), y);
    eager_loss.backward();
    EXPECT_EQ(replayed_loss, host(eager_loss)) << "step " << step;
    const std::vector<Tensor> params = model.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(params[i].grad().data_ptr(), grad_addresses[i]) << "the gradient moved";
      EXPECT_EQ(replayed[i], host(params[i].grad())) << "parameter " << i << ", step " << step;
    }
  }
}

TEST(CudaGraph, WhatWaitsForTheDeviceIsAnErrorInACapture) {
  NEED_CUDA();
  const Tensor x = ones({4}, {kFloat32, kCuda});
  const Tensor on_host = ones({4}, {kFloat32, Device::cpu()});
  CudaGraph graph;
  Tensor y;
  {
    CudaGraphCapture capture(graph);
    y = x * 2.0;
    EXPECT_EMBER_ERROR(y.select(0, 1).item(), "item: cannot run during CUDA graph capture", "cuda:0");
    EXPECT_EMBER_ERROR(sum(y).item(), "item: cannot run during CUDA graph capture");
    EXPECT_EMBER_ERROR(y.to_vector<float>(), "to_vector: cannot run during CUDA graph capture");
    EXPECT_EMBER_ERROR(y.str(), "printing a tensor: cannot run during CUDA graph capture");
    EXPECT_EMBER_ERROR(y.to(Device::cpu()), "to: cannot run during CUDA graph capture");
    EXPECT_EMBER_ERROR(on_host.to(kCuda), "to: cannot run during CUDA graph capture");
    EXPECT_EMBER_ERROR(Stream::current(kCuda).synchronize(), "Stream::synchronize: cannot run during CUDA graph");
    EXPECT_EMBER_ERROR(Stream::compute(kCuda).synchronize(), "Stream::synchronize: cannot run during CUDA graph");
    EXPECT_EMBER_ERROR(synchronize(kCuda), "synchronize: cannot run during CUDA graph capture");
    EXPECT_EMBER_ERROR(empty_cache(kCuda), "empty_cache", "while a CUDA graph is being captured");
    EXPECT_EQ(sum(on_host).item<float>(), 4.0f) << "the CPU is not captured";
    y = y + 1.0;  // the capture is still good: the errors came before anything was queued
  }
  graph.replay();
  EXPECT_EQ(host(y), std::vector<float>(4, 3.0f));
}

TEST(CudaGraph, CapturingOnTheCpuOrTheComputeStreamIsAnError) {
  CudaGraph graph;
  EXPECT_EMBER_ERROR(graph.capture_begin(Device::cpu()), "CudaGraph::capture_begin", "not on cpu");
  EXPECT_EMBER_ERROR(CudaGraphCapture(graph, Device::cpu()), "CudaGraphCapture", "not on cpu");
  EXPECT_EMBER_ERROR(CudaGraphCapture(graph, Device::meta()), "not on meta");
  EXPECT_EMBER_ERROR(graph.replay(), "CudaGraph::replay: there is no captured graph");
  EXPECT_EMBER_ERROR(graph.capture_end(), "CudaGraph::capture_end: no capture is under way");
  EXPECT_FALSE(is_current_stream_capturing(Device::cpu()));
  if (cuda_device_count() < 1) return;
  EXPECT_EMBER_ERROR(graph.capture_begin(kCuda), "compute stream, which every thread shares");
}

TEST(CudaGraph, ResetReturnsThePoolsMemoryAndTheGraphCapturesAgain) {
  NEED_CUDA();
  manual_seed(4);
  const SmallNet net;
  const Tensor x = randn({33, 17}, {kFloat32, kCuda});
  (void)net(x);
  const auto before = memory_stats(kCuda);
  CudaGraph graph;
  {
    Tensor out;
    {
      CudaGraphCapture capture(graph);
      out = net(x);
    }
    graph.replay();
    EXPECT_GT(memory_stats(kCuda)["reserved_bytes.all.current"], before.at("reserved_bytes.all.current"));
    EXPECT_EQ(host(out), host(net(x)));
  }  // the output goes: the pool's blocks are all free
  graph.reset();
  EXPECT_FALSE(graph.captured());
  auto after = memory_stats(kCuda);
  for (const char* key : {"reserved_bytes.all.current", "allocated_bytes.all.current", "segment.all.current",
                          "active_bytes.all.current"})
    EXPECT_EQ(after.at(key), before.at(key)) << key;

  Tensor again;
  {
    CudaGraphCapture capture(graph);
    again = net(x) * 2.0;
  }
  graph.replay();
  EXPECT_EQ(host(again), host(net(x) * 2.0));
}

TEST(CudaGraph, AnExceptionInTheScopeAbandonsTheCapture) {
  NEED_CUDA();
  const auto before = memory_stats(kCuda);
  CudaGraph graph;
  try {
    CudaGraphCapture capture(graph);
    const Tensor t = ones({1000}, {kFloat32, kCuda}) * 3.0;
    throw std::runtime_error("the model failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(graph.captured());
  EXPECT_FALSE(is_current_stream_capturing(kCuda));
  EXPECT_EQ(Stream::current(kCuda), Stream::compute(kCuda));
  EXPECT_EQ(memory_stats(kCuda).at("reserved_bytes.all.current"), before.at("reserved_bytes.all.current"));
}

// Calls that ember itself never makes during a capture, made through the backend: each
// fails as CUDA says, invalidates the capture, and capture_end reports that.
TEST(CudaGraph, ACallThatBreaksTheRulesInvalidatesTheCapture) {
  NEED_CUDA();
  CudaGraph graph;
  const Tensor x = ones({8}, {kFloat32, kCuda});
  auto capture_with = [&](const std::function<void(uint64_t stream)>& bad_call) {
    CudaGraphCapture capture(graph);
    const Tensor y = x + 1.0;
    bad_call(Stream::current(kCuda).id());
  };
  EXPECT_EMBER_ERROR(capture_with([](uint64_t s) {
                       EXPECT_EMBER_ERROR(kernels::cuda_stream_synchronize(0, s), "cudaErrorStreamCaptureUnsupported");
                     }),
                     "CudaGraph::capture_end: the capture failed", "cudaErrorStreamCaptureInvalidated");
  EXPECT_FALSE(graph.captured());
  EXPECT_EMBER_ERROR(capture_with([](uint64_t) {
                       EXPECT_EMBER_ERROR(kernels::cuda_device_synchronize(0), "cudaErrorStreamCaptureUnsupported");
                     }),
                     "cudaErrorStreamCaptureInvalidated");
  // An event recorded in a capture stands for a graph node: it cannot be waited for.
  Event event(kCuda);
  {
    CudaGraphCapture capture(graph);
    event.record();
  }
  // The emulator answers cudaErrorCapturedEvent; an H200 (CUDA 13.0) cudaErrorInvalidValue.
  EXPECT_EMBER_ERROR(kernels::cuda_event_synchronize(event.id()), "cudaEventSynchronize");
  graph.reset();
#if defined(EMBER_CUDA_EMULATED)
  // A capture that forks onto a second stream is legal on a GPU; the emulator refuses it.
  const Stream side = Stream::create(kCuda);
  EXPECT_EMBER_ERROR(capture_with([&](uint64_t) {
                       EXPECT_EMBER_ERROR(side.wait(Stream::current(kCuda)), "captures the work of one stream only");
                     }),
                     "cudaErrorStreamCaptureInvalidated");
#endif
}

}  // namespace
}  // namespace ember
