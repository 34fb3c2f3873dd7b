// EMBER_NUM_THREADS parsing: a positive whole number, anything else an ember::Error.
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "kernels/cpu/parallel.h"

namespace ember::kernels::cpu {
namespace {

TEST(NumThreadsEnv, AcceptsPositiveWholeNumbers) {
  EXPECT_EQ(parse_num_threads("1"), 1);
  EXPECT_EQ(parse_num_threads("4"), 4);
  EXPECT_EQ(parse_num_threads("64"), 64);
}

TEST(NumThreadsEnv, RejectsEverythingElseNamingTheVariable) {
  for (const std::string bad : {"-3", "0", "abc", "4x", "", " 4", "1.5", "99999999999"}) {
    try {
      parse_num_threads(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("EMBER_NUM_THREADS='" + bad + "'"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("positive whole number"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ember::kernels::cpu
