// The op profiler's Chrome/Perfetto trace (core/profiler_trace.h): valid JSON with the op
// calls on one track per host thread, in order and nested as they ran (RecordFunction
// ranges around their ops), each naming its device; on a CUDA device (the emulated one in
// CI) each op's device span on the track of the stream it queued to, and on the emulated
// device every kernel launch on its stream's kernel track, with an arrow from each op to its
// span; timestamps in order on every track; and the file written atomically.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/profiler_trace.h"
#include "ember.h"
#include "reference.h"
#include "temp_dir.h"
#include "tests/device.h"

namespace ember {
namespace {

using nlohmann::json;

template <class F>
json trace_of(F&& work) {
  start_op_profiler({.record_trace = true});
  work();
  stop_op_profiler();
  return json::parse(chrome_trace_json());
}

// The complete ("X") events of category `cat`, in file order.
std::vector<json> spans(const json& trace, const std::string& cat) {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("cat") == cat) out.push_back(e);
  return out;
}

std::vector<json> named(const std::vector<json>& events, const std::string& name) {
  std::vector<json> out;
  for (const json& e : events)
    if (e.at("name") == name) out.push_back(e);
  return out;
}

double end_of(const json& e) { return e.at("ts").get<double>() + e.at("dur").get<double>(); }

bool encloses(const json& outer, const json& inner) {
  return outer.at("pid") == inner.at("pid") && outer.at("tid") == inner.at("tid") &&
         outer.at("ts").get<double>() <= inner.at("ts").get<double>() && end_of(inner) <= end_of(outer);
}

// Every track's events appear in order of their start, and the events of one track either
// nest or follow each other (what the viewers draw as a stack).
void expect_tracks_ordered(const json& trace) {
  std::map<std::pair<int, int>, std::vector<json>> tracks;
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "X") tracks[{e.at("pid").get<int>(), e.at("tid").get<int>()}].push_back(e);
  for (const auto& [track, events] : tracks) {
    std::vector<double> open_ends;  // the enclosing events' ends
    for (size_t i = 0; i < events.size(); ++i) {
      if (i > 0) EXPECT_GE(events[i].at("ts").get<double>(), events[i - 1].at("ts").get<double>())
          << "track " << track.first << "/" << track.second << ": " << events[i].dump();
      const double ts = events[i].at("ts").get<double>();
      while (!open_ends.empty() && open_ends.back() <= ts) open_ends.pop_back();
      if (!open_ends.empty())
        EXPECT_LE(end_of(events[i]), open_ends.back() + 2e-3)  // ts and dur are rounded to ns
            << "track " << track.first << "/" << track.second << ": overlaps without nesting: " << events[i].dump();
      open_ends.push_back(end_of(events[i]));
    }
  }
}

// The name a metadata event gives to (pid, tid).
std::string track_name(const json& trace, int pid, int tid) {
  for (const json& e : trace.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name" && e.at("pid") == pid && e.at("tid") == tid)
      return e.at("args").at("name");
  return "";
}

std::string device_name() { return test::on_cuda() ? "cuda:0" : "cpu"; }

TEST(ProfilerTrace, OpsOnTheHostInOrderWithTheirDevice) {
  const Tensor a = randn({33, 17}), b = randn({17, 9}), c = randn({33, 9});
  Tensor y;
  const json trace = trace_of([&] { y = relu(matmul(a, b)) + c; });
  const std::vector<json> ops = spans(trace, "op");
  std::vector<std::string> names;
  for (const json& e : ops) names.push_back(e.at("name"));
  ASSERT_GE(names.size(), 3u);
  // In the order they ran.
  const auto at = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
  EXPECT_LT(at("matmul"), at("relu"));
  EXPECT_LT(at("relu"), at("add"));
  EXPECT_LT(at("add"), static_cast<long>(names.size()));
  for (const json& e : ops) {
    EXPECT_EQ(e.at("args").at("device"), device_name()) << e.dump();
    EXPECT_EQ(e.at("pid"), 1);
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
  }
  EXPECT_NE(track_name(trace, 1, ops.front().at("tid")), "");
  expect_tracks_ordered(trace);
  EXPECT_EQ(trace.at("displayTimeUnit"), "ns");
}

TEST(ProfilerTrace, RecordFunctionRangesEncloseTheirOps) {
  const Tensor x = randn({64, 32}), w = randn({32, 32});
  const json trace = trace_of([&] {
    RecordFunction step("step");
    {
      RecordFunction forward("forward");
      (void)relu(matmul(x, w));
    }
    RecordFunction backward("backward");
    (void)exp(x);
  });
  const std::vector<json> user = spans(trace, "user_annotation"), ops = spans(trace, "op");
  ASSERT_EQ(named(user, "step").size(), 1u);
  ASSERT_EQ(named(user, "forward").size(), 1u);
  ASSERT_EQ(named(user, "backward").size(), 1u);
  const json step = named(user, "step")[0], forward = named(user, "forward")[0], backward = named(user, "backward")[0];
  EXPECT_TRUE(encloses(step, forward));
  EXPECT_TRUE(encloses(step, backward));
  EXPECT_LE(end_of(forward), backward.at("ts").get<double>());
  ASSERT_EQ(named(ops, "matmul").size(), 1u);
  ASSERT_EQ(named(ops, "exp").size(), 1u);
  EXPECT_TRUE(encloses(forward, named(ops, "matmul")[0]));
  EXPECT_TRUE(encloses(forward, named(ops, "relu")[0]));
  EXPECT_TRUE(encloses(backward, named(ops, "exp")[0]));
  EXPECT_EQ(forward.at("args").at("device"), device_name());
  expect_tracks_ordered(trace);
}

TEST(ProfilerTrace, OneTrackPerHostThread) {
  const Tensor x = randn({100});
  const json trace = trace_of([&] {
    (void)exp(x);
    std::thread other([&] { (void)sin(x); });
    other.join();
  });
  const std::vector<json> ops = spans(trace, "op");
  ASSERT_EQ(named(ops, "exp").size(), 1u);
  ASSERT_EQ(named(ops, "sin").size(), 1u);
  const json main_op = named(ops, "exp")[0], other_op = named(ops, "sin")[0];
  EXPECT_NE(main_op.at("tid"), other_op.at("tid"));
  EXPECT_EQ(main_op.at("pid"), other_op.at("pid"));
  EXPECT_NE(track_name(trace, 1, main_op.at("tid")), track_name(trace, 1, other_op.at("tid")));
  expect_tracks_ordered(trace);
}

TEST(ProfilerTrace, DeviceSpansOnTheTrackOfTheirStream) {
  if (!test::on_cuda()) GTEST_SKIP() << "needs a CUDA device (EMBER_TEST_DEVICE=cuda)";
  const Device cuda = Device::cuda();
  const Stream compute = Stream::compute(cuda), side = Stream::create(cuda);
  const Tensor x = randn({257, 129});
  const json trace = trace_of([&] {
    (void)exp(x);
    side.wait(compute);  // x was made there
    StreamGuard on(side);
    (void)sin(x);
  });
  std::map<std::string, json> host;
  for (const json& e : spans(trace, "op")) host[e.at("name")] = e;
  ASSERT_TRUE(host.contains("exp") && host.contains("sin"));
  EXPECT_EQ(host["exp"].at("args").at("stream").get<uint64_t>(), compute.id());
  EXPECT_EQ(host["sin"].at("args").at("stream").get<uint64_t>(), side.id());
  // The ops' device spans: one each, on their own stream's track, on the device's process.
  const std::vector<json> gpu = spans(trace, "gpu_op");
  ASSERT_EQ(named(gpu, "exp").size(), 1u);
  ASSERT_EQ(named(gpu, "sin").size(), 1u);
  const json exp_span = named(gpu, "exp")[0], sin_span = named(gpu, "sin")[0];
  EXPECT_EQ(exp_span.at("args").at("stream").get<uint64_t>(), compute.id());
  EXPECT_EQ(sin_span.at("args").at("stream").get<uint64_t>(), side.id());
  EXPECT_EQ(exp_span.at("pid"), sin_span.at("pid"));
  EXPECT_NE(exp_span.at("tid"), sin_span.at("tid"));
  EXPECT_NE(exp_span.at("pid"), 1);
  EXPECT_NE(track_name(trace, exp_span.at("pid"), exp_span.at("tid")).find("(compute)"), std::string::npos);
  // A device span starts after its op was called on the host.
  EXPECT_GE(exp_span.at("ts").get<double>(), host["exp"].at("ts").get<double>());
  // An arrow from each op to its span: a flow's start at the op, its end at the span.
  std::map<uint64_t, json> starts, ends;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "s") starts[e.at("id").get<uint64_t>()] = e;
    if (e.at("ph") == "f") ends[e.at("id").get<uint64_t>()] = e;
  }
  EXPECT_EQ(starts.size(), gpu.size());
  EXPECT_EQ(ends.size(), gpu.size());
  for (const auto& [name, span] : {std::pair{"exp", exp_span}, std::pair{"sin", sin_span}}) {
    const auto end = std::find_if(ends.begin(), ends.end(), [&](const auto& f) {
      return f.second.at("tid") == span.at("tid") && f.second.at("ts") == span.at("ts");
    });
    ASSERT_NE(end, ends.end()) << name;
    ASSERT_TRUE(starts.contains(end->first)) << name;
    const json& start = starts[end->first];
    EXPECT_EQ(start.at("pid"), host[name].at("pid")) << name;
    EXPECT_EQ(start.at("tid"), host[name].at("tid")) << name;
    EXPECT_EQ(start.at("ts"), host[name].at("ts")) << name;
  }
#if defined(EMBER_CUDA_EMULATED)
  // Every kernel the emulator ran, on the kernel track of its stream, inside its op's span.
  const std::vector<json> kernels = spans(trace, "kernel");
  std::map<uint64_t, int> per_stream;
  for (const json& k : kernels) {
    const uint64_t stream = k.at("args").at("stream");
    ++per_stream[stream];
    EXPECT_EQ(k.at("args").at("grid").size(), 3u);
    EXPECT_GE(k.at("args").at("block").at(0).get<int>(), 1);
    const json& op = stream == side.id() ? sin_span : exp_span;
    EXPECT_EQ(k.at("pid"), op.at("pid"));
    EXPECT_NE(k.at("tid"), op.at("tid"));
    // Launched by its op: it cannot start before the host called the op (one clock for both).
    EXPECT_GE(k.at("ts").get<double>(), host[stream == side.id() ? "sin" : "exp"].at("ts").get<double>()) << k.dump();
    EXPECT_NE(track_name(trace, k.at("pid"), k.at("tid")).find("kernels"), std::string::npos);
  }
  EXPECT_GE(per_stream[compute.id()], 1);
  EXPECT_GE(per_stream[side.id()], 1);
  EXPECT_EQ(per_stream.size(), 2u);
#endif
  expect_tracks_ordered(trace);
}

TEST(ProfilerTrace, ResumeKeepsTheTraceAFreshStartDropsIt) {
  const Tensor x = randn({50});
  start_op_profiler({.record_trace = true});
  (void)exp(x);
  stop_op_profiler();
  (void)sin(x);  // between the runs: not in the trace
  start_op_profiler(/*resume=*/true);
  (void)cos(x);
  const std::vector<OpProfile> table = stop_op_profiler();
  json trace = json::parse(chrome_trace_json());
  EXPECT_EQ(named(spans(trace, "op"), "exp").size(), 1u);
  EXPECT_EQ(named(spans(trace, "op"), "sin").size(), 0u);
  EXPECT_EQ(named(spans(trace, "op"), "cos").size(), 1u);
  EXPECT_TRUE(
      std::any_of(table.begin(), table.end(), [](const OpProfile& p) { return p.op == "cos" && p.calls == 1; }));
  trace = trace_of([&] { (void)tanh(x); });
  EXPECT_EQ(named(spans(trace, "op"), "exp").size(), 0u);
  EXPECT_EQ(named(spans(trace, "op"), "tanh").size(), 1u);
}

TEST(ProfilerTrace, NoTraceWhileRunningOrWhenNoneWasRecorded) {
  start_op_profiler({.record_trace = true});
  EXPECT_THROW(chrome_trace_json(), Error);
  stop_op_profiler();
  start_op_profiler();  // the table only
  (void)exp(randn({4}));
  stop_op_profiler();
  EXPECT_NE(test::error_message([] { chrome_trace_json(); }).find("record_trace"), std::string::npos);
  // A range outside a trace costs nothing and records nothing.
  { RecordFunction r("untraced"); }
}

class ProfilerTraceFile : public test::TempDirTest {};

TEST_F(ProfilerTraceFile, ExportIsAtomic) {
  const Tensor x = randn({10, 10});
  (void)trace_of([&] { (void)matmul(x, x); });
  const std::string target = path("run.trace.json");
  write(target, "old contents");
  export_chrome_trace(target);
  EXPECT_EQ(read(target), chrome_trace_json());
  EXPECT_FALSE(named(spans(json::parse(read(target)), "op"), "matmul").empty());
  // Nothing else was left in the folder (no temporary files).
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), std::filesystem::directory_iterator()), 1);
  // A path that cannot be written is an error naming it, and the folder is as it was.
  std::filesystem::create_directory(path("a_folder"));
  EXPECT_NE(test::error_message([&] { export_chrome_trace(path("a_folder")); }).find("export_chrome_trace"),
            std::string::npos);
  EXPECT_TRUE(std::filesystem::is_directory(path("a_folder")));
  // Through a symlink: the file it names is replaced, the link stays.
  std::filesystem::create_symlink(target, path("link.json"));
  export_chrome_trace(path("link.json"));
  EXPECT_TRUE(std::filesystem::is_symlink(path("link.json")));
  EXPECT_EQ(read(target), chrome_trace_json());
}

}  // namespace
}  // namespace ember
