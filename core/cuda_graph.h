// CUDA graphs, in the manner of torch.cuda.CUDAGraph and torch.cuda.graph: the work ops
// queue on a CUDA device during a capture is recorded once, then replayed with one launch,
// without the host's cost per kernel.
//
//   ember::CudaGraph graph;
//   const Tensor x = zeros({128, 784}, Device::cuda());  // a static input: the graph reads its address
//   Tensor y;
//   {
//     ember::CudaGraphCapture capture(graph);  // a capture stream is current inside the scope
//     y = model(x);                            // recorded into the graph, not run
//   }
//   x.copy_(batch);                            // new values into the same memory
//   graph.replay();                            // y now holds model(batch)
//
// A capture records the kernels, copies and memsets that ops queue on the calling
// thread's current stream of one CUDA device. Replays touch the addresses the capture
// saw, so the tensors a graph reads or writes must live as long as it does: write new
// inputs into them (copy_), never make new ones. What the capture allocates comes from a
// private pool of the graph (Note [Private pools] in memory/caching_allocator.h): it is
// never handed to other work while the graph lives, and each replay writes the graph's
// outputs again. Random ops replay the numbers drawn at capture.
//
// Nothing that waits for the device can run in a capture: item(), to_vector(), printing,
// copies to the CPU or from pageable host memory, Stream / Event / device synchronize
// raise ember::Error before queuing anything (a copy from pinned memory with non_blocking
// = true is captured). docs/backends.md, "CUDA graphs", has the rest.
#pragma once

#include <cstdint>
#include <optional>

#include "core/device.h"
#include "core/stream.h"

namespace ember {

// Which calls of other code a capture forbids (cudaStreamCaptureMode): kGlobal forbids
// potentially unsafe CUDA calls (cudaMalloc, synchronizing, querying events) to this thread
// and to every thread in global mode; kThreadLocal to this thread only; kRelaxed to none.
enum class CaptureMode { kGlobal, kThreadLocal, kRelaxed };

class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();  // reset()
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Begins capturing the work queued on the calling thread's current stream of `device`.
  // That stream must not be the device's compute stream, which every thread shares
  // (CudaGraphCapture makes a stream of its own current).
  void capture_begin(Device device = Device::cuda(), CaptureMode mode = CaptureMode::kGlobal);
  // Ends the capture, on its thread and stream, and makes the graph ready to replay.
  void capture_end();
  // Queues the graph on the calling thread's current stream of its device; returns at once.
  void replay() const;
  // Drops the graph (or abandons a capture under way) and returns its private pool's
  // memory; the graph can then capture again.
  void reset();

  bool captured() const { return state_ == State::kCaptured; }
  Device device() const { return device_; }

 private:
  enum class State { kEmpty, kCapturing, kCaptured };
  State state_ = State::kEmpty;
  Device device_;
  uint64_t stream_ = 0;  // the capture's stream
  uint64_t exec_ = 0;    // the instantiated graph
  uint64_t pool_ = 0;    // its private pool in the device's caching allocator
};

// Captures into `graph` for its scope, as torch.cuda.graph: makes the calling thread's
// capture stream of `device` current (one per thread and device, after the caller's
// stream's work so far), and at the end of the scope ends the capture and makes the
// caller's stream current again, after the capture stream. Leaving the scope by an
// exception abandons the capture (graph.reset()).
class CudaGraphCapture {
 public:
  explicit CudaGraphCapture(CudaGraph& graph, Device device = Device::cuda(), CaptureMode mode = CaptureMode::kGlobal);
  ~CudaGraphCapture() noexcept(false);  // capture_end's error, unless an exception is under way
  CudaGraphCapture(const CudaGraphCapture&) = delete;
  CudaGraphCapture& operator=(const CudaGraphCapture&) = delete;

 private:
  CudaGraph& graph_;
  Stream caller_;
  std::optional<StreamGuard> on_capture_stream_;
  int exceptions_;  // std::uncaught_exceptions() when the scope began
};

// Whether the calling thread's current stream of `device` is capturing (false off CUDA).
bool is_current_stream_capturing(Device device);

namespace detail {
// Raises ember::Error naming `op` when `stream` is capturing: for what waits for the
// device or reads a result on the host, before it queues anything.
void check_not_capturing(const Stream& stream, const char* op);
}  // namespace detail

}  // namespace ember
