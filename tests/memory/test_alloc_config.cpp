// EMBER_ALLOC_CONF: every key, its range checks, and errors that quote the string.
#include <gtest/gtest.h>

#include <cstdlib>

#include "base/error.h"
#include "memory/config.h"

namespace ember::memory {
namespace {

std::string parse_error(const std::string& text) {
  try {
    AllocatorConfig::parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(AllocConfig, EveryKey) {
  const AllocatorConfig c = AllocatorConfig::parse(
      "max_split_size_mb:256, garbage_collection_threshold:0.8,roundup_power2_divisions:4,pressure_threshold:0.75");
  EXPECT_EQ(c.max_split_size, std::size_t(256) << 20);
  EXPECT_DOUBLE_EQ(c.garbage_collection_threshold, 0.8);
  EXPECT_EQ(c.roundup_power2_divisions, 4u);
  EXPECT_DOUBLE_EQ(c.pressure_threshold, 0.75);
  EXPECT_EQ(AllocatorConfig::parse(c.str()).str(), c.str());
}

TEST(AllocConfig, DefaultsAndEmptyString) {
  const AllocatorConfig c = AllocatorConfig::parse("");
  EXPECT_EQ(c.max_split_size, AllocatorConfig{}.max_split_size);
  EXPECT_EQ(c.garbage_collection_threshold, 0);
  EXPECT_EQ(c.roundup_power2_divisions, 0u);
  EXPECT_DOUBLE_EQ(c.pressure_threshold, 0.9);
  EXPECT_EQ(c.str(), "");
}

// str() prints fractions exactly: with 6 digits 0.9999999 became "1", which parse() rejects.
TEST(AllocConfig, StrParsesBackForFractionsNearTheirBounds) {
  for (const char* text : {"garbage_collection_threshold:0.9999999", "pressure_threshold:0.1234567891234",
                           "garbage_collection_threshold:1e-300"}) {
    const AllocatorConfig c = AllocatorConfig::parse(text);
    EXPECT_EQ(c.str(), text);
    EXPECT_EQ(AllocatorConfig::parse(c.str()).str(), c.str());
  }
}

TEST(AllocConfig, MalformedStringsAreErrorsThatQuoteThem) {
  EXPECT_NE(parse_error("max_split_size_mb=256").find("EMBER_ALLOC_CONF 'max_split_size_mb=256': 'max_split_size_mb=256' has no ':'"),
            std::string::npos);
  EXPECT_NE(parse_error("max_split_size:256").find("unknown key 'max_split_size'"), std::string::npos);
  EXPECT_NE(parse_error("max_split_size_mb:20").find("above 20"), std::string::npos);
  EXPECT_NE(parse_error("max_split_size_mb:lots").find("not 'lots'"), std::string::npos);
  EXPECT_NE(parse_error("garbage_collection_threshold:1").find("strictly between 0 and 1"), std::string::npos);
  EXPECT_NE(parse_error("garbage_collection_threshold:0.5x").find("not '0.5x'"), std::string::npos);
  EXPECT_NE(parse_error("roundup_power2_divisions:3").find("power of two"), std::string::npos);
  EXPECT_NE(parse_error("pressure_threshold:0").find("(0, 1]"), std::string::npos);
  EXPECT_NE(parse_error("pressure_threshold:1.2,max_split_size_mb:64").find("'pressure_threshold:1.2,max_split_size_mb:64'"),
            std::string::npos);
}

TEST(AllocConfig, FromEnvironment) {
  setenv("EMBER_ALLOC_CONF", "max_split_size_mb:64", 1);
  EXPECT_EQ(AllocatorConfig::from_env().max_split_size, std::size_t(64) << 20);
  setenv("EMBER_ALLOC_CONF", "bogus", 1);
  EXPECT_THROW(AllocatorConfig::from_env(), Error);
  unsetenv("EMBER_ALLOC_CONF");
  EXPECT_EQ(AllocatorConfig::from_env().max_split_size, AllocatorConfig{}.max_split_size);
}

TEST(AllocConfig, CountsFromTheEnvironmentAreWholeNumbers) {
  unsetenv("EMBER_TEST_COUNT");
  EXPECT_EQ(count_from_env("EMBER_TEST_COUNT", 7), 7u);
  setenv("EMBER_TEST_COUNT", " 4096 ", 1);
  EXPECT_EQ(count_from_env("EMBER_TEST_COUNT"), 4096u);
  for (const char* bad : {"64MiB", "lots", "-1", ""}) {
    setenv("EMBER_TEST_COUNT", bad, 1);
    try {
      count_from_env("EMBER_TEST_COUNT");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("EMBER_TEST_COUNT='") + bad + "'"), std::string::npos) << e.what();
    }
  }
  unsetenv("EMBER_TEST_COUNT");
}

}  // namespace
}  // namespace ember::memory
