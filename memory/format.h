// Byte counts as people read them.
#pragma once

#include <cstddef>
#include <string>

namespace ember::memory {

// "512 bytes", "1.50 GiB": two decimals from KiB on.
std::string format_size(std::size_t bytes);

}  // namespace ember::memory
