// CudaGraph and CudaGraphCapture (core/cuda_graph.h): the capture's bookkeeping over the
// backend's capture calls (core/device_runtime.h) and the device allocator's private pool.
#include "core/cuda_graph.h"

#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <utility>

#include "base/error.h"
#include "core/device_runtime.h"
#include "core/memory.h"

namespace ember {
namespace {

bool capturing(const Stream& stream) {
  return stream.device().is_cuda() && kernels::cuda_stream_capturing(stream.device().index, stream.id());
}

// The calling thread's capture stream of `device`: one per thread, so that threads
// capturing at once do not meet on a stream; it lives for the process, as streams do.
Stream capture_stream(Device device) {
  thread_local std::map<int, Stream> streams;
  auto it = streams.find(device.index);
  if (it == streams.end()) it = streams.emplace(device.index, Stream::create(device)).first;
  return it->second;
}

}  // namespace

void detail::check_not_capturing(const Stream& stream, const char* op) {
  EMBER_CHECK(!capturing(stream), op, ": cannot run during CUDA graph capture: it waits for ", stream.device().str(),
              ", whose current stream is capturing (its work runs only when the graph is replayed); do it "
              "before the capture or after a replay");
}

bool is_current_stream_capturing(Device device) { return capturing(Stream::current(device)); }

CudaGraph::~CudaGraph() {
  try {
    reset();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: ~CudaGraph: %s\n", e.what());
  }
}

void CudaGraph::capture_begin(Device device, CaptureMode mode) {
  EMBER_CHECK(device.is_cuda(), "CudaGraph::capture_begin: CUDA graphs capture work queued on a CUDA device, not on ",
              device.str());
  EMBER_CHECK(state_ == State::kEmpty, "CudaGraph::capture_begin: the graph ",
              state_ == State::kCapturing ? "is being captured" : "holds a captured graph", "; reset() it first");
  const Stream stream = Stream::current(device);
  EMBER_CHECK(!(stream == Stream::compute(device)), "CudaGraph::capture_begin: the current stream of ", device.str(),
              " is its compute stream, which every thread shares, so their work would be captured too; capture on "
              "a stream of your own (CudaGraphCapture makes one current)");
  EMBER_CHECK(!capturing(stream), "CudaGraph::capture_begin: the current stream of ", device.str(),
              " is capturing already");
  memory::CachingAllocator& allocator = device_allocator(device);
  // The pool before the capture, as PyTorch orders them: a free on the way never sees a
  // capture without its pool.
  pool_ = allocator.begin_allocate_to_pool(stream.id());
  try {
    kernels::cuda_capture_begin(device.index, stream.id(), mode);
  } catch (...) {
    allocator.end_allocate_to_pool(pool_);
    allocator.release_pool(pool_);
    throw;
  }
  device_ = device;
  stream_ = stream.id();
  state_ = State::kCapturing;
}

void CudaGraph::capture_end() {
  EMBER_CHECK(state_ == State::kCapturing, "CudaGraph::capture_end: no capture is under way (capture_begin first)");
  EMBER_CHECK(Stream::current(device_).id() == stream_, "CudaGraph::capture_end: the current stream of ",
              device_.str(), " is not the one the capture began on");
  memory::CachingAllocator& allocator = device_allocator(device_);
  try {
    exec_ = kernels::cuda_capture_end(device_.index, stream_);
  } catch (const Error& e) {
    // The capture is over either way; what it allocated is no graph's.
    state_ = State::kEmpty;
    allocator.end_allocate_to_pool(pool_);
    allocator.release_pool(pool_);
    throw Error(std::string("CudaGraph::capture_end: the capture failed, so there is no graph (a call that is "
                            "not allowed during a capture invalidates it): ") +
                e.what());
  }
  allocator.end_allocate_to_pool(pool_);
  state_ = State::kCaptured;
}

void CudaGraph::replay() const {
  EMBER_CHECK(state_ == State::kCaptured, "CudaGraph::replay: there is no captured graph (capture_begin, the ops, "
              "capture_end first)");
  kernels::cuda_graph_launch(device_.index, exec_, Stream::current(device_).id());
}

void CudaGraph::reset() {
  if (state_ == State::kEmpty) return;
  const State was = std::exchange(state_, State::kEmpty);
  memory::CachingAllocator& allocator = device_allocator(device_);
  if (was == State::kCapturing) {
    try {  // an invalidated capture ends with an error and no graph: nothing to keep either way
      kernels::cuda_graph_destroy(kernels::cuda_capture_end(device_.index, stream_));
    } catch (const Error&) {
    }
    allocator.end_allocate_to_pool(pool_);
  } else {
    kernels::cuda_graph_destroy(exec_);
  }
  allocator.release_pool(pool_);
}

CudaGraphCapture::CudaGraphCapture(CudaGraph& graph, Device device, CaptureMode mode)
    : graph_(graph), caller_(Stream::current(device)), exceptions_(std::uncaught_exceptions()) {
  EMBER_CHECK(device.is_cuda(), "CudaGraphCapture: CUDA graphs capture work queued on a CUDA device, not on ",
              device.str());
  const Stream stream = capture_stream(device);
  stream.wait(caller_);
  on_capture_stream_.emplace(stream);
  try {
    graph_.capture_begin(device, mode);
  } catch (...) {
    on_capture_stream_.reset();
    throw;
  }
}

CudaGraphCapture::~CudaGraphCapture() noexcept(false) {
  const Stream stream = Stream::current(caller_.device());
  if (std::uncaught_exceptions() > exceptions_) {
    try {
      graph_.reset();
    } catch (const std::exception&) {  // the exception under way is the one to report
    }
    on_capture_stream_.reset();
    return;
  }
  struct Restore {
    std::optional<StreamGuard>& guard;
    ~Restore() { guard.reset(); }
  } restore{on_capture_stream_};
  graph_.capture_end();
  caller_.wait(stream);
}

}  // namespace ember
