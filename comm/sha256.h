// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the store's challenge-response
// (comm/store_auth.h). Written here rather than taken from OpenSSL: ember links no
// crypto library, and the handshake hashes a few hundred bytes per connection.
// Tested with the FIPS 180-4 and RFC 4231 vectors (tests/comm/test_sha256.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ember::comm {

using Digest = std::array<uint8_t, 32>;

// An incremental SHA-256: update() any number of times, then digest() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Digest digest();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  std::size_t used_ = 0;    // bytes in buf_
  uint64_t length_ = 0;     // bytes hashed so far
};

Digest sha256(std::string_view data);
Digest hmac_sha256(std::string_view key, std::string_view message);

// Equal in time that does not depend on where the digests first differ.
bool digests_equal(const Digest& a, const Digest& b);

}  // namespace ember::comm
