// The CUDA backend's recording for the op profiler's trace (trace.cu), as device.cu's
// current_stream reaches it: an op being traced learns where its work goes from the first
// stream it asks for.
#pragma once

struct CUstream_st;

namespace ember::kernels::cuda {

// Whether an op traced by trace.cu is open on the calling thread (kept in device.cu, read
// there by current_stream on every call).
void set_op_traced(bool on);
// The open op(s) of the calling thread queue their work on `stream` of `device`.
void note_op_stream(int device, CUstream_st* stream);

}  // namespace ember::kernels::cuda
