#include "memory/config.h"

#include <charconv>
#include <cstdlib>
#include <sstream>

#include "base/error.h"

namespace ember::memory {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

template <class T>
bool parse_number(const std::string& s, T& out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end;
}

// The shortest text that parses back to exactly f: ostream's default 6 digits would
// print 0.9999999 as "1", which parse() then rejects as out of range.
std::string shortest(double f) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::string(buf, r.ptr);
}

}  // namespace

AllocatorConfig AllocatorConfig::parse(const std::string& text) {
  AllocatorConfig c;
  auto fail = [&](const std::string& why) {
    EMBER_FAIL("EMBER_ALLOC_CONF '", text, "': ", why,
               " (expected key:value pairs separated by commas; keys: max_split_size_mb, "
               "garbage_collection_threshold, roundup_power2_divisions, pressure_threshold)");
  };
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item = trim(item);
    if (item.empty()) continue;
    const auto colon = item.find(':');
    if (colon == std::string::npos) fail("'" + item + "' has no ':'");
    const std::string key = trim(item.substr(0, colon)), value = trim(item.substr(colon + 1));
    if (key == "max_split_size_mb") {
      std::size_t mb = 0;
      if (!parse_number(value, mb) || mb <= 20 || mb > (std::size_t(1) << 40))
        fail("max_split_size_mb must be a whole number of MiB above 20, not '" + value + "'");
      c.max_split_size = mb << 20;
    } else if (key == "garbage_collection_threshold") {
      double f = 0;
      if (!parse_number(value, f) || !(f > 0 && f < 1))
        fail("garbage_collection_threshold must be a fraction strictly between 0 and 1, not '" + value + "'");
      c.garbage_collection_threshold = f;
    } else if (key == "roundup_power2_divisions") {
      std::size_t n = 0;
      if (!parse_number(value, n) || n == 0 || (n & (n - 1)) != 0 || n > 64)
        fail("roundup_power2_divisions must be a power of two from 1 to 64, not '" + value + "'");
      c.roundup_power2_divisions = n;
    } else if (key == "pressure_threshold") {
      double f = 0;
      if (!parse_number(value, f) || !(f > 0 && f <= 1))
        fail("pressure_threshold must be a fraction in (0, 1], not '" + value + "'");
      c.pressure_threshold = f;
    } else {
      fail("unknown key '" + key + "'");
    }
  }
  return c;
}

AllocatorConfig AllocatorConfig::from_env() {
  const char* env = std::getenv("EMBER_ALLOC_CONF");
  return env ? parse(env) : AllocatorConfig{};
}

std::size_t count_from_env(const char* var, std::size_t fallback, std::size_t lo, std::size_t hi) {
  const char* env = std::getenv(var);
  if (!env) return fallback;
  std::size_t n = 0;
  EMBER_CHECK(parse_number(trim(env), n) && n >= lo && n <= hi, var, "='", env, "': expected a whole number from ", lo,
              " to ", hi);
  return n;
}

std::string AllocatorConfig::str() const {
  const AllocatorConfig d;
  std::ostringstream os;
  const char* sep = "";
  if (max_split_size != d.max_split_size) os << sep << "max_split_size_mb:" << (max_split_size >> 20), sep = ",";
  if (garbage_collection_threshold != d.garbage_collection_threshold)
    os << sep << "garbage_collection_threshold:" << shortest(garbage_collection_threshold), sep = ",";
  if (roundup_power2_divisions != d.roundup_power2_divisions)
    os << sep << "roundup_power2_divisions:" << roundup_power2_divisions, sep = ",";
  if (pressure_threshold != d.pressure_threshold) os << sep << "pressure_threshold:" << shortest(pressure_threshold);
  return os.str();
}

}  // namespace ember::memory
