#include "core/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "core/dispatch.h"
#include "core/profiler_runtime.h"
#include "core/profiler_trace.h"

namespace ember {

namespace kernels {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

int64_t OpStubBase::profile_begin() const {
  if (g_tracing.load(std::memory_order_relaxed)) [[unlikely]]
    trace_op_begin(name_);
  return now_ns();
}

void OpStubBase::profile_end(int64_t begin_ns) const {
  const int64_t end_ns = now_ns();
  nanos_.fetch_add(end_ns - begin_ns, std::memory_order_relaxed);
  calls_.fetch_add(1, std::memory_order_relaxed);
  if (g_tracing.load(std::memory_order_relaxed)) [[unlikely]]
    trace_op_end(name_, begin_ns, end_ns, /*user_range=*/false);
}

}  // namespace kernels

void start_op_profiler(bool resume) {
  start_op_profiler(resume ? kernels::trace_options() : ProfilerOptions{}, resume);
}

void start_op_profiler(const ProfilerOptions& options, bool resume) {
  if (!resume)
    for (const kernels::OpStubBase* s : kernels::all_stubs()) s->reset_profile();
  kernels::trace_start(options, resume);
  kernels::g_profiling = true;
}

std::vector<OpProfile> stop_op_profiler() {
  kernels::g_profiling = false;
  kernels::trace_stop();
  std::vector<OpProfile> out;
  for (const kernels::OpStubBase* s : kernels::all_stubs())
    if (s->profiled_calls() > 0) out.push_back({s->name(), s->profiled_calls(), s->profiled_nanoseconds() * 1e-9});
  std::sort(out.begin(), out.end(), [](const OpProfile& a, const OpProfile& b) { return a.seconds > b.seconds; });
  return out;
}

std::string format_op_profile(const std::vector<OpProfile>& profile, double wall_seconds) {
  std::string s = "| op | calls | seconds | share |\n|---|---|---|---|\n";
  char line[160];
  double kernels = 0;
  for (const OpProfile& p : profile) {
    kernels += p.seconds;
    std::snprintf(line, sizeof line, "| %s | %lld | %.3f | %.1f%% |\n", p.op.c_str(), static_cast<long long>(p.calls),
                  p.seconds, wall_seconds > 0 ? 100 * p.seconds / wall_seconds : 0.0);
    s += line;
  }
  std::snprintf(line, sizeof line, "| (outside kernels: autograd, allocation, framework) | | %.3f | %.1f%% |\n",
                wall_seconds - kernels, wall_seconds > 0 ? 100 * (wall_seconds - kernels) / wall_seconds : 0.0);
  return s + line;
}

}  // namespace ember
