// EMBER_NUM_THREADS parsing: a whole number from 1 to the cores, anything else an
// ember::Error naming the variable and the range; set_num_threads' own bounds.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "core/runtime.h"
#include "kernels/cpu/parallel.h"

namespace ember::kernels::cpu {
namespace {

int cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

TEST(NumThreadsEnv, AcceptsOneToTheCores) {
  EXPECT_EQ(parse_num_threads("1"), 1);
  EXPECT_EQ(parse_num_threads(std::to_string(cores())), cores());
}

TEST(NumThreadsEnv, RejectsEverythingElseNamingTheVariableAndTheRange) {
  const std::string range = "from 1 to " + std::to_string(cores());
  const std::vector<std::string> bads = {"-3", "0", "abc", "4x", "", " 4", "1.5", "99999999999", "99999",
                                         std::to_string(cores() + 1)};
  for (const std::string& bad : bads) {
    try {
      parse_num_threads(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("EMBER_NUM_THREADS='" + bad + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(range), std::string::npos) << e.what();
    }
  }
}

// 99999 threads cannot start (std::system_error before): set_num_threads stops at 1024,
// and the pool keeps its size.
TEST(NumThreadsEnv, SetNumThreadsHasBounds) {
  const int before = get_num_threads();
  for (int bad : {0, -3, kMaxThreads + 1, 99999}) {
    try {
      set_num_threads(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("from 1 to 1024, got " + std::to_string(bad)), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(get_num_threads(), before);
  }
}

}  // namespace
}  // namespace ember::kernels::cpu
