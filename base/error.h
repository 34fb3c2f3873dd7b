// ember::Error, the one exception type ember throws for bad input, and EMBER_CHECK.
// base/ is the ground floor, below memory/: header-only, it includes nothing from ember,
// so every folder (memory's OutOfMemoryError included) raises the same ember::Error.
//
// Every message names the operation and the values involved, e.g.
//   matmul: cannot multiply [32, 784] by [512, 256] (784 != 512)
// so that a user can fix the call without reading ember's source.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ember {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace ember

// Throws ember::Error with the streamed message when `cond` is false.
#define EMBER_CHECK(cond, ...)                                  \
  do {                                                          \
    if (!(cond)) [[unlikely]]                                   \
      throw ::ember::Error(::ember::detail::str(__VA_ARGS__));  \
  } while (0)

#define EMBER_FAIL(...) throw ::ember::Error(::ember::detail::str(__VA_ARGS__))
