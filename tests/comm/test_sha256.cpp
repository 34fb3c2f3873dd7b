// SHA-256 and HMAC-SHA256 (comm/sha256.h) against the published vectors: FIPS 180-4's
// examples (NIST's "SHA256.pdf", "SHA2_Additional.pdf") and RFC 4231's HMAC test cases.
#include <gtest/gtest.h>

#include <string>

#include "comm/sha256.h"

namespace ember::comm {
namespace {

std::string hex(const Digest& d) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : d) out += digits[b >> 4], out += digits[b & 15];
  return out;
}

TEST(Sha256, Fips180Vectors) {
  EXPECT_EQ(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex(sha256("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmno"
                       "pqrsmnopqrstnopqrstu")),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(hex(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Fed in pieces of every size from 1 to 130 bytes (across the 64-byte blocks and the
// 55/56-byte padding edge): the same digest as all at once.
TEST(Sha256, IncrementalMatchesOneShot) {
  std::string data;
  for (int i = 0; i < 300; ++i) data += static_cast<char>(i * 7 + 3);
  for (size_t len : {0, 1, 55, 56, 63, 64, 65, 119, 120, 300}) {
    const std::string part = data.substr(0, len);
    for (size_t piece = 1; piece <= 130; piece += 13) {
      Sha256 s;
      for (size_t at = 0; at < part.size(); at += piece) s.update(std::string_view(part).substr(at, piece));
      EXPECT_EQ(hex(s.digest()), hex(sha256(part))) << "length " << len << ", pieces of " << piece;
    }
  }
}

TEST(HmacSha256, Rfc4231Vectors) {
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4 += static_cast<char>(i);
  const std::string big_key(131, '\xaa');
  EXPECT_EQ(hex(hmac_sha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hex(hmac_sha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  EXPECT_EQ(hex(hmac_sha256(key4, std::string(50, '\xcd'))),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Case 5 gives only the first 128 bits.
  EXPECT_EQ(hex(hmac_sha256(std::string(20, '\x0c'), "Test With Truncation")).substr(0, 32),
            "a3b6167473100ee06e0c796c2955552b");
  EXPECT_EQ(hex(hmac_sha256(big_key, "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hex(hmac_sha256(big_key,
                            "This is a test using a larger than block-size key and a larger than block-size data. The "
                            "key needs to be hashed before being used by the HMAC algorithm.")),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(HmacSha256, DigestsEqual) {
  const Digest a = sha256("a");
  Digest b = a;
  EXPECT_TRUE(digests_equal(a, b));
  for (size_t i : {0, 17, 31}) {
    b = a;
    b[i] ^= 1;
    EXPECT_FALSE(digests_equal(a, b)) << i;
  }
}

}  // namespace
}  // namespace ember::comm
