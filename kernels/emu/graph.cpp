// Stream capture and CUDA graphs on the emulated devices: cudaStreamBeginCapture,
// cudaStreamEndCapture, cudaStreamIsCapturing, cudaThreadExchangeStreamCaptureMode,
// cudaGraphInstantiate, cudaGraphLaunch and the destroys, and the rules of what may run
// while a capture is under way (device_model.h), as the CUDA programming guide states them:
// - synchronizing with or querying a capturing stream, an event recorded in a capture, or
//   a device with a capture under way is not permitted, in every capture mode;
// - potentially unsafe calls (cudaMalloc, synchronous copies and memsets, syncs and queries
//   of other streams and events) are prohibited to a thread whose own mode is not
//   relaxed while it has a capture under way begun in a mode other than relaxed, or, when
//   its mode is global, while any thread has a capture under way begun in global mode;
// - a call that breaks a rule fails (cudaErrorStreamCaptureUnsupported) and invalidates
//   the capture: its end returns cudaErrorStreamCaptureInvalidated and no graph.
// The graph is the capturing stream's work in order; a launch queues it as one piece of
// work on the launching stream. Captures that span streams are not emulated: a stream
// that joins a capture by waiting on one of its events is refused (runtime.cpp).
#if defined(EMBER_CUDA_EMULATED)

// emu.h first: the toolkit's headers keep the qualifiers it defines.
#include "kernels/emu/emu.h"
#include "kernels/emu/device_model.h"
#include "kernels/emu/runtime.h"

#include <memory>
#include <utility>
#include <vector>

using Nodes = std::vector<std::function<void()>>;

// The graph handles' types, which driver_types.h leaves opaque.
struct CUgraph_st {
  Nodes nodes;
};
struct CUgraphExec_st {
  std::shared_ptr<const Nodes> nodes;  // shared with launches still queued
};

namespace ember::emu::model {
namespace {

thread_local cudaStreamCaptureMode thread_mode = cudaStreamCaptureModeGlobal;

cudaError_t refuse(const std::vector<std::shared_ptr<Capture>>& broken, const char* why) {
  for (const auto& c : broken) c->invalidated = true;
  return fail(cudaErrorStreamCaptureUnsupported, why);
}

}  // namespace

cudaError_t check_unsafe_call() {
  if (!any_capture() || thread_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  const std::thread::id self = std::this_thread::get_id();
  std::vector<std::shared_ptr<Capture>> broken;
  for (int d = 0; d < device_count(); ++d)
    for (std::shared_ptr<Capture>& c : captures(d)) {
      const bool prohibits = c->thread == self ? c->mode != cudaStreamCaptureModeRelaxed
                                               : c->mode == cudaStreamCaptureModeGlobal &&
                                                     thread_mode == cudaStreamCaptureModeGlobal;
      if (prohibits) broken.push_back(std::move(c));
    }
  return broken.empty() ? cudaSuccess
                        : refuse(broken, "a potentially unsafe call while a capture is under way; see "
                                         "cudaThreadExchangeStreamCaptureMode");
}

cudaError_t check_stream_sync(cudaStream_t stream) {
  if (!stream) return check_unsafe_call();  // the legacy stream does not wait for non-blocking ones
  if (std::shared_ptr<Capture> c = capture_of(stream))
    return refuse({c}, "the stream is capturing: its work goes into a graph and never runs");
  return check_unsafe_call();
}

cudaError_t check_device_sync(int device) {
  const std::vector<std::shared_ptr<Capture>> under_way = captures(device);
  if (under_way.empty()) return check_unsafe_call();
  return refuse(under_way, "a stream of the device is capturing");
}

cudaError_t check_enqueue(cudaStream_t stream) {
  const std::shared_ptr<Capture> c = capture_of(stream);
  return c && c->invalidated ? fail(cudaErrorStreamCaptureInvalidated) : cudaSuccess;
}

}  // namespace ember::emu::model

using namespace ember::emu::model;

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (!mode) return fail(cudaErrorInvalidValue);
  std::swap(*mode, thread_mode);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (!stream) return fail(cudaErrorInvalidValue, "the legacy stream cannot be captured");
  if (capture_of(stream)) return fail(cudaErrorInvalidValue, "the stream is already capturing");
  auto c = std::make_shared<Capture>();
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  set_capture(stream, std::move(c));
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  *graph = nullptr;
  const std::shared_ptr<Capture> c = stream ? capture_of(stream) : nullptr;
  if (!c) return fail(cudaErrorStreamCaptureUnmatched, "the stream is not capturing");
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return fail(cudaErrorStreamCaptureWrongThread);
  set_capture(stream, nullptr);  // from here push() queues again, so the nodes are ours
  if (c->invalidated) return fail(cudaErrorStreamCaptureInvalidated);
  *graph = new CUgraph_st{std::move(c->nodes)};
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  const std::shared_ptr<Capture> c = stream ? capture_of(stream) : nullptr;
  *status = !c                ? cudaStreamCaptureStatusNone
            : c->invalidated ? cudaStreamCaptureStatusInvalidated
                             : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!exec || !graph) return fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{std::make_shared<const Nodes>(graph->nodes)};
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return fail(cudaErrorInvalidValue);
  if (failed()) return fail(cudaErrorLaunchFailure);
  if (std::shared_ptr<Capture> c = stream ? capture_of(stream) : nullptr) {
    c->invalidated = true;
    return fail(cudaErrorStreamCaptureUnsupported, "launching a graph into a capture is not emulated");
  }
  ember::emu::enqueue(stream, [nodes = exec->nodes] {
    for (const auto& node : *nodes) node();
  });
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  if (!exec) return fail(cudaErrorInvalidValue);
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (!graph) return fail(cudaErrorInvalidValue);
  delete graph;
  return cudaSuccess;
}

#endif  // EMBER_CUDA_EMULATED
