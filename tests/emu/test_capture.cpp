// Stream capture on the emulated device (kernels/emu/graph.cpp), through the CUDA runtime
// API itself: a capturing stream records its work and a launch replays it; what CUDA
// forbids during a capture fails with CUDA's error and invalidates the capture, under the
// capture modes' rules. Only in the EMBER_CUDA=EMULATED build, whose libember defines
// the runtime API.
#if defined(EMBER_CUDA_EMULATED)

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

class Capture : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&buffer, kBytes), cudaSuccess);
  }
  void TearDown() override {
    cudaStreamCaptureStatus status;
    cudaStreamIsCapturing(stream, &status);
    if (status != cudaStreamCaptureStatusNone) {  // a failed test's capture
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(stream, &g);
      if (g) cudaGraphDestroy(g);
    }
    cudaFree(buffer);
    cudaStreamDestroy(stream);
    cudaGetLastError();
  }
  std::vector<uint8_t> read() {
    std::vector<uint8_t> v(kBytes);
    EXPECT_EQ(cudaMemcpy(v.data(), buffer, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  // Ends the capture, expecting it to have been invalidated.
  void expect_invalidated() {
    cudaStreamCaptureStatus status;
    EXPECT_EQ(cudaStreamIsCapturing(stream, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
    cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(1);
    EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(graph, nullptr);
    cudaGetLastError();
  }
  static constexpr size_t kBytes = 4096;
  cudaStream_t stream = nullptr;
  void* buffer = nullptr;
};

TEST_F(Capture, WorkIsRecordedNotRunAndEachLaunchReplaysIt) {
  CUDA_OK(cudaMemset(buffer, 0, kBytes));
  std::atomic<int> calls{0};
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status;
  CUDA_OK(cudaStreamIsCapturing(stream, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  CUDA_OK(cudaMemsetAsync(buffer, 7, kBytes, stream));
  CUDA_OK(cudaLaunchHostFunc(stream, [](void* n) { ++*static_cast<std::atomic<int>*>(n); }, &calls));
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(read(), std::vector<uint8_t>(kBytes, 0)) << "captured work ran";
  EXPECT_EQ(calls.load(), 0);
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphDestroy(graph));  // the executable graph keeps what it needs
  for (int i = 0; i < 3; ++i) CUDA_OK(cudaGraphLaunch(exec, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  EXPECT_EQ(read(), std::vector<uint8_t>(kBytes, 7));
  EXPECT_EQ(calls.load(), 3);
  CUDA_OK(cudaGraphExecDestroy(exec));
}

TEST_F(Capture, SynchronousCopiesSyncsAndFreesAreRefused) {
  std::vector<uint8_t> host(kBytes);
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  EXPECT_EQ(cudaMemcpy(host.data(), buffer, kBytes, cudaMemcpyDeviceToHost), cudaErrorStreamCaptureUnsupported);
  expect_invalidated();

  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorStreamCaptureUnsupported) << "in every mode";
  expect_invalidated();

  void* other = nullptr;
  CUDA_OK(cudaMalloc(&other, 512));
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
  EXPECT_EQ(cudaFree(other), cudaErrorStreamCaptureUnsupported) << "cudaFree waits for the device";
  expect_invalidated();
  CUDA_OK(cudaFree(other));

  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  EXPECT_EQ(cudaMemcpyAsync(buffer, host.data(), kBytes, cudaMemcpyHostToDevice, stream),
            cudaErrorStreamCaptureUnsupported) << "pageable memory cannot be a graph's";
  expect_invalidated();
}

TEST_F(Capture, CudaMallocFollowsTheCaptureModes) {
  void* p = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CUDA_OK(cudaThreadExchangeStreamCaptureMode(&mode));
  EXPECT_EQ(cudaMalloc(&p, 512), cudaSuccess) << "a relaxed thread may allocate";
  CUDA_OK(cudaThreadExchangeStreamCaptureMode(&mode));
  EXPECT_EQ(mode, cudaStreamCaptureModeRelaxed);
  cudaError_t other_thread = cudaSuccess;
  std::thread([&] { void* q = nullptr; other_thread = cudaMalloc(&q, 512); }).join();
  EXPECT_EQ(other_thread, cudaErrorStreamCaptureUnsupported) << "a global capture binds global threads";
  expect_invalidated();
  CUDA_OK(cudaFree(p));

  void* q = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  std::thread([&] { other_thread = cudaMalloc(&q, 512); }).join();
  EXPECT_EQ(other_thread, cudaSuccess) << "a thread-local capture binds its own thread only";
  EXPECT_EQ(cudaMalloc(&p, 512), cudaErrorStreamCaptureUnsupported);
  expect_invalidated();
  CUDA_OK(cudaFree(q));
}

TEST_F(Capture, EventsAcrossTheCapturesBoundary) {
  cudaEvent_t eager = nullptr, captured = nullptr;
  CUDA_OK(cudaEventCreate(&eager));
  CUDA_OK(cudaEventCreate(&captured));
  CUDA_OK(cudaEventRecord(eager, stream));
  CUDA_OK(cudaStreamSynchronize(stream));

  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CUDA_OK(cudaEventRecord(captured, stream));
  CUDA_OK(cudaStreamWaitEvent(stream, captured, 0));  // inside one capture: fine
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphDestroy(graph));
  EXPECT_EQ(cudaEventSynchronize(captured), cudaErrorCapturedEvent);
  EXPECT_EQ(cudaEventQuery(captured), cudaErrorCapturedEvent);
  cudaGetLastError();

  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  EXPECT_EQ(cudaStreamWaitEvent(stream, eager, 0), cudaErrorStreamCaptureIsolation);
  expect_invalidated();

  // A second stream joining the capture (a fork): legal on a GPU, not emulated.
  cudaStream_t side = nullptr;
  CUDA_OK(cudaStreamCreate(&side));
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CUDA_OK(cudaEventRecord(captured, stream));
  EXPECT_EQ(cudaStreamWaitEvent(side, captured, 0), cudaErrorStreamCaptureUnsupported);
  EXPECT_NE(std::string(cudaGetErrorString(cudaErrorStreamCaptureUnsupported)).find("one stream only"),
            std::string::npos);
  expect_invalidated();
  CUDA_OK(cudaStreamDestroy(side));
  CUDA_OK(cudaEventDestroy(eager));
  CUDA_OK(cudaEventDestroy(captured));
}

TEST_F(Capture, EndsOnTheThreadThatBeganIt) {
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  cudaError_t ended = cudaSuccess;
  std::thread([&] {
    cudaGraph_t g = nullptr;
    ended = cudaStreamEndCapture(stream, &g);
  }).join();
  EXPECT_EQ(ended, cudaErrorStreamCaptureWrongThread);
  cudaGraph_t graph = nullptr;
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphDestroy(graph));
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureUnmatched) << "no capture is under way";
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal), cudaErrorInvalidValue);
  cudaGetLastError();
}

}  // namespace

#endif  // EMBER_CUDA_EMULATED
