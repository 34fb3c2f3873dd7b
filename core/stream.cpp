#include "core/stream.h"

#include <utility>

#include "base/error.h"
#include "core/cuda_graph.h"
#include "core/device_runtime.h"

namespace ember {

Stream Stream::current(Device device) {
  return {device, device.is_cuda() ? kernels::cuda_current_stream(device.index) : 0};
}

Stream Stream::compute(Device device) {
  return {device, device.is_cuda() ? kernels::cuda_compute_stream(device.index) : 0};
}

Stream Stream::create(Device device) {
  EMBER_CHECK(device.is_cuda(), "Stream::create: streams are made on CUDA devices, not on ", device.str());
  return {device, kernels::cuda_create_stream(device.index)};
}

void Stream::synchronize() const {
  if (!device_.is_cuda()) return;
  detail::check_not_capturing(*this, "Stream::synchronize");
  detail::check_not_capturing(current(device_), "Stream::synchronize");
  kernels::cuda_stream_synchronize(device_.index, id_);
}

bool Stream::query() const {
  if (!device_.is_cuda()) return true;
  detail::check_not_capturing(*this, "Stream::query");
  detail::check_not_capturing(current(device_), "Stream::query");
  return kernels::cuda_stream_query(device_.index, id_);
}

void Stream::wait(const Stream& other) const {
  if (device_.is_cpu() && other.device_.is_cpu()) return;
  Event e(other.device_);
  e.record(other);
  wait(e);
}

void Stream::wait(const Event& event) const {
  if (event.id() == 0) return;  // a CPU event: already complete
  EMBER_CHECK(device_.is_cuda(), "Stream::wait: the CPU stream cannot wait on ", event.device().str(),
              "'s event; synchronize the event instead");
  kernels::cuda_stream_wait_event(device_.index, id_, event.id());
}

StreamGuard::StreamGuard(const Stream& stream) : previous_(Stream::current(stream.device())) {
  if (stream.device().is_cuda()) kernels::cuda_set_current_stream(stream.device().index, stream.id());
}

StreamGuard::~StreamGuard() {
  if (previous_.device().is_cuda()) kernels::cuda_set_current_stream(previous_.device().index, previous_.id());
}

int current_cuda_device() { return kernels::cuda_current_device(); }

CudaDeviceGuard::CudaDeviceGuard(int device) : previous_(kernels::cuda_current_device()) {
  kernels::cuda_set_device(device);
}
CudaDeviceGuard::~CudaDeviceGuard() { kernels::cuda_restore_device(previous_); }

Event::Event(Device device, bool timing) : device_(device) {
  if (device.is_cuda()) id_ = kernels::cuda_event_create(device.index, timing);
}

Event::~Event() {
  if (id_ != 0) kernels::cuda_event_destroy(id_);
}

Event::Event(Event&& other) noexcept : device_(other.device_), id_(std::exchange(other.id_, 0)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (id_ != 0) kernels::cuda_event_destroy(id_);
    device_ = other.device_;
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void Event::record(const Stream& stream) {
  EMBER_CHECK(stream.device() == device_, "Event::record: the event belongs to ", device_.str(), ", the stream to ",
              stream.device().str());
  if (id_ != 0) kernels::cuda_event_record(id_, device_.index, stream.id());
}

bool Event::query() const {
  if (id_ == 0) return true;
  detail::check_not_capturing(Stream::current(device_), "Event::query");
  return kernels::cuda_event_query(id_);
}

void Event::synchronize() const {
  if (id_ == 0) return;
  detail::check_not_capturing(Stream::current(device_), "Event::synchronize");
  kernels::cuda_event_synchronize(id_);
}

float Event::elapsed_ms(const Event& end) const {
  EMBER_CHECK(id_ != 0 && end.id_ != 0, "Event::elapsed_ms: both events must be CUDA events made with timing = true");
  return kernels::cuda_event_elapsed_ms(id_, end.id_);
}

void synchronize(Device device) {
  if (!device.is_cuda()) return;
  detail::check_not_capturing(Stream::current(device), "synchronize");
  kernels::cuda_device_synchronize(device.index);
}

}  // namespace ember
