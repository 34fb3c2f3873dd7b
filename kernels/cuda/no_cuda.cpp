// The CUDA entry points of a build without the CUDA backend (EMBER_CUDA=OFF or no
// toolkit): no devices, nothing to register, and every stream or copy call an error.
#include "base/error.h"
#include "core/device_runtime.h"
#include "core/dispatch.h"
#include "core/kernel_scratch.h"
#include "core/profiler_runtime.h"
#include "kernels/cuda/variants.h"

namespace ember::kernels {
namespace {

[[noreturn]] void no_backend(const char* what) {
  EMBER_FAIL(what, ": this build of ember has no CUDA backend (configure with -DEMBER_CUDA=ON, or EMULATED)");
}

}  // namespace

bool cuda_backend_built() { return false; }
int cuda_device_count() { return 0; }
memory::CachingAllocator& cuda_allocator(int) { no_backend("cuda_allocator"); }
memory::CachingAllocator& pinned_allocator() { no_backend("pinned_allocator"); }
void register_cuda_kernels() {}

int cuda_current_device() { no_backend("current_device"); }
void cuda_set_device(int) { no_backend("set_device"); }
void cuda_restore_device(int) noexcept {}
uint64_t cuda_compute_stream(int) { no_backend("Stream"); }
uint64_t cuda_current_stream(int) { no_backend("Stream"); }
void cuda_set_current_stream(int, uint64_t) { no_backend("Stream"); }
uint64_t cuda_create_stream(int) { no_backend("Stream"); }
void cuda_stream_synchronize(int, uint64_t) { no_backend("Stream"); }
bool cuda_stream_query(int, uint64_t) { no_backend("Stream"); }
void cuda_device_synchronize(int) { no_backend("synchronize"); }
uint64_t cuda_event_create(int, bool) { no_backend("Event"); }
void cuda_event_destroy(uint64_t) { no_backend("Event"); }
void cuda_event_record(uint64_t, int, uint64_t) { no_backend("Event"); }
void cuda_stream_wait_event(int, uint64_t, uint64_t) { no_backend("Event"); }
bool cuda_event_query(uint64_t) { no_backend("Event"); }
void cuda_event_synchronize(uint64_t) { no_backend("Event"); }
float cuda_event_elapsed_ms(uint64_t, uint64_t) { no_backend("Event"); }
void cuda_copy(void*, Device, const void*, Device, std::size_t, bool) { no_backend("to"); }
bool cuda_stream_capturing(int, uint64_t) { no_backend("CudaGraph"); }
void cuda_capture_begin(int, uint64_t, CaptureMode) { no_backend("CudaGraph"); }
uint64_t cuda_capture_end(int, uint64_t) { no_backend("CudaGraph"); }
void cuda_graph_launch(int, uint64_t, uint64_t) { no_backend("CudaGraph"); }
void cuda_graph_destroy(uint64_t) { no_backend("CudaGraph"); }

// The op profiler's trace: no device work to record, no NVTX.
void cuda_trace_start(bool, bool) {}
void cuda_trace_stop() {}
void cuda_trace_op_begin(const char*) {}
OpPlace cuda_trace_op_end(const char*) { return {}; }
std::vector<DeviceSpan> cuda_trace_collect() { return {}; }


void cuda::set_gemm_variant(std::string_view) { no_backend("set_gemm_variant"); }
std::string cuda::gemm_variant() { no_backend("gemm_variant"); }
void cuda::set_conv_variant(std::string_view) { no_backend("set_conv_variant"); }
std::string cuda::conv_variant() { no_backend("conv_variant"); }
void cuda::set_conv_deterministic(bool) { no_backend("set_conv_deterministic"); }
bool cuda::conv_deterministic() { no_backend("conv_deterministic"); }
void cuda::set_conv_benchmark(bool) { no_backend("set_conv_benchmark"); }
bool cuda::conv_benchmark() { no_backend("conv_benchmark"); }
void cuda::set_spmm_variant(std::string_view) { no_backend("set_spmm_variant"); }
std::string cuda::spmm_variant() { no_backend("spmm_variant"); }
void cuda::set_rnn_variant(std::string_view) { no_backend("set_rnn_variant"); }
std::string cuda::rnn_variant() { no_backend("rnn_variant"); }
void cuda::set_attention_variant(std::string_view) { no_backend("set_attention_variant"); }
std::string cuda::attention_variant() { no_backend("attention_variant"); }
std::string cuda::attention_last_forward() { no_backend("attention_last_forward"); }

// No CUDA backend: no CUDA kernel takes scratch.
std::vector<std::size_t> cuda_conv2d_scratch(ConvPass, const Shape&, const Shape&, const Shape&, DType, bool,
                                             const Conv2dParams&) {
  return {};
}

}  // namespace ember::kernels
