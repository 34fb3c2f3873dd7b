// The op profiler's trace (core/profiler_trace.h): each host thread keeps its op events in
// a buffer of its own (its lock is uncontended but for export), the CUDA backend keeps the
// device spans (kernels/cuda/trace.cu), and chrome_trace_json lays both out as Trace
// Event Format tracks.
#include "core/profiler_trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "core/atomic_file.h"
#include "core/device_runtime.h"
#include "core/dispatch.h"
#include "core/profiler_runtime.h"

namespace ember {

namespace kernels {
std::atomic<bool> g_tracing{false};
}  // namespace kernels

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct HostEvent {
  const char* name;
  int64_t begin_ns, end_ns;
  kernels::OpPlace place;
  bool user_range;
};

struct ThreadEvents {
  std::mutex mu;
  int index = 0;
  long os_tid = 0;
  std::vector<HostEvent> events;
};

struct Session {
  std::mutex mu;  // guards what follows
  ProfilerOptions options;
  bool recorded = false;  // a run since the last fresh start kept a trace
  int64_t origin_ns = 0;
  std::vector<std::shared_ptr<ThreadEvents>> threads;
  std::vector<kernels::DeviceSpan> device_spans;
  std::set<std::string> names;  // RecordFunction's, interned: events point at them
};
// Never destroyed: threads may end ops during static destruction.
Session& session() {
  static Session* s = new Session;
  return *s;
}
std::atomic<bool> recording{false};  // host events are kept (options.record_trace)

thread_local std::shared_ptr<ThreadEvents> this_thread_events;

ThreadEvents& thread_events() {
  if (!this_thread_events) {
    auto t = std::make_shared<ThreadEvents>();
    t->os_tid = static_cast<long>(syscall(SYS_gettid));
    Session& s = session();
    std::lock_guard lock(s.mu);
    t->index = static_cast<int>(s.threads.size());
    s.threads.push_back(t);
    this_thread_events = std::move(t);
  }
  return *this_thread_events;
}

}  // namespace

namespace kernels {

void trace_op_begin(const char* name) { cuda_trace_op_begin(name); }

void trace_op_end(const char* name, int64_t begin_ns, int64_t end_ns, bool user_range) {
  const OpPlace place = cuda_trace_op_end(name);
  if (!recording.load(std::memory_order_relaxed)) return;
  ThreadEvents& t = thread_events();
  std::lock_guard lock(t.mu);
  t.events.push_back({name, begin_ns, end_ns, place, user_range});
}

void trace_start(const ProfilerOptions& options, bool resume) {
  Session& s = session();
  if (!resume) {
    cuda_trace_collect();  // what an earlier run left is dropped
    std::lock_guard lock(s.mu);
    for (const auto& t : s.threads) {
      std::lock_guard tl(t->mu);
      t->events.clear();
    }
    s.device_spans.clear();
    s.recorded = false;
    s.origin_ns = now_ns();
  }
  {
    std::lock_guard lock(s.mu);
    s.options = options;
    s.recorded = s.recorded || options.record_trace;
  }
  recording = options.record_trace;
  cuda_trace_start(options.record_trace, options.nvtx);
  g_tracing = options.record_trace || options.nvtx;
}

void trace_stop() {
  const bool traced = g_tracing.exchange(false);
  recording = false;
  if (traced && trace_options().record_trace) {
    std::vector<DeviceSpan> spans = cuda_trace_collect();  // while the emulator still reports launches
    Session& s = session();
    std::lock_guard lock(s.mu);
    s.device_spans.insert(s.device_spans.end(), spans.begin(), spans.end());
  }
  cuda_trace_stop();
}

const ProfilerOptions& trace_options() { return session().options; }

}  // namespace kernels

// --- The JSON ------------------------------------------------------------------------

namespace {

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Processes in the trace: the host, then one per CUDA device.
constexpr int kHostPid = 1;
int device_pid(int device) { return 2 + device; }

struct Writer {
  std::string out;
  int64_t origin_ns;
  bool first = true;
  void begin_event() {
    out += first ? "\n" : ",\n";
    first = false;
  }
  void metadata(const char* what, int pid, int tid, const std::string& name) {
    begin_event();
    out += "{\"ph\":\"M\",\"name\":\"";
    out += what;
    out += "\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":" +
           json_string(name) + "}}";
  }
  void sort_index(const char* what, int pid, int tid, int index) {
    begin_event();
    out += "{\"ph\":\"M\",\"name\":\"" + std::string(what) + "\",\"pid\":" + std::to_string(pid) +
           ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"sort_index\":" + std::to_string(index) + "}}";
  }
  // One end of an arrow from a host op to its span on a device (PyTorch's "ac2g" flows):
  // "s" on the host op, "f" on the span, each bound to the slice it lies in.
  void flow(char phase, uint64_t id, int pid, int tid, int64_t ns) {
    begin_event();
    char buf[192];
    std::snprintf(buf, sizeof buf,
                  "{\"ph\":\"%c\",\"id\":%" PRIu64 ",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"cat\":\"ac2g\","
                  "\"name\":\"ac2g\"%s}",
                  phase, id, pid, tid, static_cast<double>(ns - origin_ns) / 1e3, phase == 'f' ? ",\"bp\":\"e\"" : "");
    out += buf;
  }
  // A complete event ("X"); `args` is the inside of its args object.
  void span(const char* name, const char* cat, int pid, int tid, int64_t begin_ns, int64_t end_ns,
            const std::string& args) {
    begin_event();
    char times[96];
    std::snprintf(times, sizeof times, "\"ts\":%.3f,\"dur\":%.3f", static_cast<double>(begin_ns - origin_ns) / 1e3,
                  static_cast<double>(std::max<int64_t>(end_ns - begin_ns, 0)) / 1e3);
    out += "{\"ph\":\"X\",\"name\":" + json_string(name) + ",\"cat\":\"" + cat + "\",\"pid\":" + std::to_string(pid) +
           ",\"tid\":" + std::to_string(tid) + "," + times + ",\"args\":{" + args + "}}";
  }
};

// Earlier first; of two beginning together, the longer (the enclosing one) first.
template <class E>
void sort_track(std::vector<E>& events) {
  std::stable_sort(events.begin(), events.end(), [](const E& a, const E& b) {
    return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.end_ns > b.end_ns;
  });
}

std::string stream_name(uint64_t stream) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "stream 0x%" PRIx64, stream);
  return buf;
}

}  // namespace

std::string chrome_trace_json() {
  EMBER_CHECK(!kernels::g_profiling.load(), "chrome_trace_json: the op profiler is running; call stop_op_profiler() "
                                            "first (stopping waits for the devices' recorded work)");
  Session& s = session();
  std::lock_guard lock(s.mu);
  EMBER_CHECK(s.recorded, "chrome_trace_json: no trace was recorded; start the profiler with "
                          "start_op_profiler({.record_trace = true})");
  Writer w{"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", s.origin_ns};
  w.metadata("process_name", kHostPid, 0, "ember host (pid " + std::to_string(getpid()) + ")");
  w.sort_index("process_sort_index", kHostPid, 0, 0);
  for (const auto& t : s.threads) {
    std::vector<HostEvent> events;
    {
      std::lock_guard tl(t->mu);
      events = t->events;
    }
    if (events.empty()) continue;
    const int tid = t->index + 1;
    w.metadata("thread_name", kHostPid, tid,
               "thread " + std::to_string(t->index) + (t->os_tid == getpid() ? " (main)" : "") + " (tid " +
                   std::to_string(t->os_tid) + ")");
    w.sort_index("thread_sort_index", kHostPid, tid, t->index);
    sort_track(events);
    for (const HostEvent& e : events) {
      std::string args = e.place.device < 0 ? "\"device\":\"cpu\""
                                            : "\"device\":\"cuda:" + std::to_string(e.place.device) +
                                                  "\",\"stream\":" + std::to_string(e.place.stream);
      w.span(e.name, e.user_range ? "user_annotation" : "op", kHostPid, tid, e.begin_ns, e.end_ns, args);
      if (e.place.correlation != 0) w.flow('s', e.place.correlation, kHostPid, tid, e.begin_ns);
    }
  }
  // Device tracks: per device and stream, the ops' spans, then (emulated device) the kernels.
  std::map<std::tuple<int, uint64_t, bool>, std::vector<kernels::DeviceSpan>> tracks;
  for (const kernels::DeviceSpan& d : s.device_spans) tracks[{d.device, d.stream, d.kernel}].push_back(d);
  std::map<int, std::map<uint64_t, int>> stream_rank;  // each device's streams, numbered in order
  for (const auto& [key, spans] : tracks) stream_rank[std::get<0>(key)].try_emplace(std::get<1>(key), 0);
  for (auto& [device, ranks] : stream_rank) {
    int rank = 0;
    for (auto& [stream, r] : ranks) r = rank++;
    w.metadata("process_name", device_pid(device), 0, "cuda:" + std::to_string(device));
    w.sort_index("process_sort_index", device_pid(device), 0, 1 + device);
  }
  for (const auto& [key, spans] : tracks) {
    const auto [device, stream, kernel] = key;
    const int pid = device_pid(device), tid = 2 * stream_rank[device][stream] + (kernel ? 2 : 1);
    const bool compute = stream == kernels::cuda_compute_stream(device);
    w.metadata("thread_name", pid, tid,
               stream_name(stream) + (compute ? " (compute)" : "") + (kernel ? " kernels" : ""));
    w.sort_index("thread_sort_index", pid, tid, tid);
    std::vector<kernels::DeviceSpan> sorted = spans;
    sort_track(sorted);
    for (const kernels::DeviceSpan& d : sorted) {
      std::string args = "\"device\":\"cuda:" + std::to_string(device) + "\",\"stream\":" + std::to_string(stream);
      if (kernel) {
        char shape[160];
        std::snprintf(shape, sizeof shape, ",\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],\"shared_bytes\":%zu",
                      d.grid[0], d.grid[1], d.grid[2], d.block[0], d.block[1], d.block[2], d.shared_bytes);
        args += shape;
      }
      w.span(d.name, kernel ? "kernel" : "gpu_op", pid, tid, d.begin_ns, d.end_ns, args);
      if (d.correlation != 0) w.flow('f', d.correlation, pid, tid, d.begin_ns);
    }
  }
  return w.out + "\n]}\n";
}

void export_chrome_trace(const std::string& path) {
  write_file_atomically(path, chrome_trace_json(), "export_chrome_trace");
}

RecordFunction::RecordFunction(const std::string& name) {
  if (!kernels::g_tracing.load(std::memory_order_relaxed)) return;
  {
    Session& s = session();
    std::lock_guard lock(s.mu);
    name_ = s.names.insert(name).first->c_str();
  }
  kernels::trace_op_begin(name_);
  begin_ns_ = now_ns();
}

RecordFunction::~RecordFunction() {
  if (name_ != nullptr) kernels::trace_op_end(name_, begin_ns_, now_ns(), /*user_range=*/true);
}

}  // namespace ember
