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
}

}  // namespace
}  // namespace ember
