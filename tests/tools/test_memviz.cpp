// ember-memviz's drawing: an SVG with a band per op, the reserved line and the peak,
// from a snapshot made by real tensor traffic; clear errors for what is not a snapshot.
#include <gtest/gtest.h>

#include "ember.h"
#include "memory/export.h"
#include "tools/memviz/memviz.h"

namespace ember {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Memviz, DrawsABandPerOpWithThePeak) {
  memory::CachingAllocator& host = memory::host_allocator();
  host.record_history(100000);
  {
    Tensor x = randn({256, 256});
    for (int i = 0; i < 5; ++i) {
      Tensor y = relu(matmul(x, x));
      Tensor z = softmax(y, 1);
    }
  }
  const std::string svg = tools::render_memory_svg(memory::to_json(host.snapshot()));
  host.record_history(0);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_TRUE(contains(svg, ">matmul (peak ")) << svg.substr(0, 2000);
  EXPECT_TRUE(contains(svg, ">relu (peak "));
  EXPECT_TRUE(contains(svg, "memory over time, cpu: peak "));
  EXPECT_TRUE(contains(svg, ">reserved</text>"));
  EXPECT_TRUE(contains(svg, "<polygon"));
}

TEST(Memviz, SaysWhatIsWrongWithItsInput) {
  auto error_of = [](const std::string& text) {
    try {
      tools::render_memory_svg(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_TRUE(contains(error_of("{not json"), "not JSON"));
  EXPECT_TRUE(contains(error_of("[1, 2]"), "not an ember memory snapshot"));
  EXPECT_TRUE(contains(error_of(R"({"history": [], "stats": {}})"), "has no history"));
  // Fields of the wrong type or range used to be uncaught nlohmann exceptions,
  // signed overflows or (times going backwards) writes outside the columns.
  auto one = [](const std::string& entry, const std::string& stats = "{}") {
    return R"({"stats": )" + stats + R"(, "history": [)" + entry + "]}";
  };
  const std::string ok = R"({"action": "alloc", "size": 8, "address": 1, "time_ns": 5})";
  EXPECT_TRUE(contains(error_of(one(ok)), "(no error)"));
  EXPECT_TRUE(contains(error_of(one(R"({"action": "alloc", "size": "8", "address": 1, "time_ns": 5})")),
                       "'size' is \"8\""));
  EXPECT_TRUE(contains(error_of(one(R"({"action": "alloc", "size": -8, "address": 1, "time_ns": 5})")), "'size'"));
  EXPECT_TRUE(contains(error_of(one(R"({"action": 7, "size": 8, "address": 1, "time_ns": 5})")), "malformed"));
  EXPECT_TRUE(contains(error_of(one(R"({"action": "alloc", "size": 8, "address": 1})")), "no 'time_ns'"));
  EXPECT_TRUE(contains(error_of(one("[1]")), "not an object"));
  EXPECT_TRUE(contains(error_of(one(ok + "," + R"({"action": "alloc", "size": 8, "address": 2, "time_ns": 1})")),
                       "back in time"));
  EXPECT_TRUE(contains(error_of(one(R"({"action": "other", "size": 8, "address": 1, "time_ns": 5})")),
                       "no alloc, free_requested or segment events"));
  EXPECT_TRUE(contains(error_of(one(ok + "," + R"({"action": "alloc", "size": 8, "address": 2,
                                                   "time_ns": 4611686018427387904})")),
                       "(no error)"));  // a span of 2^62 ns: columns computed without overflow
  EXPECT_TRUE(contains(error_of(one(ok, R"({"allocated_bytes.all.current": -5})")), "stats"));
  EXPECT_TRUE(contains(error_of(one(ok, R"({"allocated_bytes.all.current": "5"})")), "stats"));
  EXPECT_TRUE(contains(error_of(one(ok, R"({"allocated_bytes.all.current": 1e89})")), "stats"));
  // Found by fuzz_memviz: a float address was converted to uint64 out of range (UBSan).
  EXPECT_TRUE(contains(error_of(one(R"({"action": "alloc", "size": 8, "address": 1e89, "time_ns": 5})")),
                       "'address'"));
  EXPECT_TRUE(contains(error_of(R"({"device": 3, "stats": {}, "history": [)" + ok + "]}"), "malformed"));
}

}  // namespace
}  // namespace ember
