// Note [Tensor checksums] (core/safetensors.h): CRC-32C against its published check value
// on both implementations; a flipped byte in any tensor is refused by that tensor's name;
// files without checksums load (with a note); a header with some, wrong or foreign ones is
// refused; the checksums stay out of the metadata; and Python reads the file to the spec.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "core/checksum.h"
#include "ember.h"
#include "tests/core/temp_dir.h"

namespace ember {
namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Crc32c, MatchesTheCheckValueAndTheTables) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC catalogue's check value for CRC-32C
  EXPECT_EQ(detail::crc32c_tables("123456789", 9, 0), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::mt19937 rng(7);
  std::string bytes(100003, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(9), size_t(63), size_t(4096), bytes.size()}) {
    SCOPED_TRACE(n);
    const uint32_t whole = crc32c(bytes.data(), n);
    EXPECT_EQ(whole, detail::crc32c_tables(bytes.data(), n, 0));
    EXPECT_EQ(crc32c(bytes.data() + n / 3, n - n / 3, crc32c(bytes.data(), n / 3)), whole);  // continued
  }
}

class Checksums : public test::TempDirTest {
 protected:
  // A checkpoint-like file: tensors of several dtypes and sizes, and metadata.
  std::string file() {
    const std::string p = path("ck.safetensors");
    save_safetensors(p,
                     {{"model.0.weight", randn({16, 8})},
                      {"model.0.bias", randn({16}).to(kFloat64)},
                      {"optimizer.state.0.exp_avg", randn({16, 8}).to(kBFloat16)},
                      {"optimizer.step", scalar_tensor(3, kInt64)},
                      {"mask", ones({5}).to(kBool)}},
                     {{"epoch", "2"}, {"model", "mlp"}});
    return p;
  }
  // The file's header, and the byte where its data section starts.
  static std::pair<nlohmann::json, size_t> header(const std::string& bytes) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
    return {nlohmann::json::parse(bytes.substr(8, n)), 8 + n};
  }
  // The bytes with `header` in place of the file's own (the data section unchanged).
  static std::string with_header(const std::string& bytes, const nlohmann::json& h) {
    const size_t data = header(bytes).second;
    std::string text = h.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>(uint64_t(text.size()) >> (8 * i));
    return len + text + bytes.substr(data);
  }
  std::string load_error(const std::string& bytes) {
    write(path("bad.safetensors"), bytes);
    try {
      load_safetensors(path("bad.safetensors"));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(Checksums, EveryTensorCarriesOneAsAStringAndLoadingVerifiesThem) {
  const std::string bytes = read(file());
  const nlohmann::json meta = header(bytes).first["__metadata__"];
  for (const char* name : {"model.0.weight", "model.0.bias", "optimizer.state.0.exp_avg", "optimizer.step", "mask"}) {
    ASSERT_TRUE(meta.contains(std::string("crc32c:") + name)) << meta.dump();
    EXPECT_TRUE(meta[std::string("crc32c:") + name].is_string());
    EXPECT_EQ(meta[std::string("crc32c:") + name].get<std::string>().size(), 8u);
  }
  const SafetensorsFile f = load_safetensors(path("ck.safetensors"));
  EXPECT_TRUE(f.checksummed);
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"epoch", "2"}, {"model", "mlp"}}));
}

// One flipped bit anywhere in a tensor's bytes: the load names that tensor.
TEST_F(Checksums, AFlippedByteInAnyTensorIsRefusedByName) {
  const std::string good = read(file());
  const auto [h, data] = header(good);
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const uint64_t begin = it.value()["data_offsets"][0], end = it.value()["data_offsets"][1];
    for (uint64_t at : {begin, (begin + end) / 2, end - 1}) {
      std::string bad = good;
      bad[data + at] = static_cast<char>(bad[data + at] ^ 0x10);
      const std::string e = load_error(bad);
      EXPECT_TRUE(has(e, "tensor '" + it.key() + "' is damaged: its bytes have CRC-32C ")) << it.key() << ": " << e;
      EXPECT_TRUE(has(e, path("bad.safetensors"))) << e;
    }
  }
}

TEST_F(Checksums, AFileWithoutThemLoadsUnverifiedWithANote) {
  const std::string good = read(file());
  nlohmann::json h = header(good).first;
  nlohmann::json meta = nlohmann::json::object();
  for (auto it = h["__metadata__"].begin(); it != h["__metadata__"].end(); ++it)
    if (it.key().rfind("crc32c:", 0) != 0) meta[it.key()] = it.value();
  h["__metadata__"] = meta;
  std::string plain = with_header(good, h);
  plain[plain.size() - 1] ^= 1;  // unverified: a change goes unnoticed
  write(path("plain.safetensors"), plain);
  testing::internal::CaptureStderr();
  const SafetensorsFile f = load_safetensors(path("plain.safetensors"));
  load_safetensors(path("plain.safetensors"));  // once per file
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(f.checksummed);
  EXPECT_EQ(f.tensors.size(), 5u);
  EXPECT_EQ(err, "note: '" + path("plain.safetensors") +
                     "' carries no tensor checksums (written by another tool, or by ember before them); loaded "
                     "without verifying its bytes\n");
}

// The files the Python twins write (tests/refcases/twin_io.py) carry checksums that
// ember's loader verifies, as its own files do. (The files made with libtorch beside them,
// conv2d.safetensors and the rest, predate checksums and load with the note.)
TEST(TwinFiles, CarryChecksumsThatVerify) {
  for (const char* name : {"attention", "module_api", "nn_init", "nn_ops", "optim_ext", "recurrent", "vision"}) {
    const std::string p = std::string(EMBER_REFCASES_DIR) + "/" + name + ".safetensors";
    testing::internal::CaptureStderr();
    const SafetensorsFile f = load_safetensors(p);
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_TRUE(f.checksummed) << p;
    EXPECT_EQ(err, "") << p;
    for (const auto& [key, value] : f.metadata) EXPECT_NE(key.rfind("crc32c:", 0), 0u) << p << ": " << key;
  }
}

TEST_F(Checksums, AHeaderWithSomeWrongOrForeignOnesIsRefused) {
  const std::string good = read(file());
  const nlohmann::json h = header(good).first;
  nlohmann::json some = h;
  some["__metadata__"].erase("crc32c:mask");
  EXPECT_TRUE(has(load_error(with_header(good, some)), "tensor 'mask' has no checksum while the others have one"));
  nlohmann::json foreign = h;
  foreign["__metadata__"]["crc32c:ghost"] = "00000000";
  EXPECT_TRUE(has(load_error(with_header(good, foreign)), "has a checksum for a tensor 'ghost' that it does not hold"));
  nlohmann::json malformed = h;
  malformed["__metadata__"]["crc32c:mask"] = "xyz";
  EXPECT_TRUE(has(load_error(with_header(good, malformed)), "the checksum of tensor 'mask' is 'xyz', not 8 hex digits"));
  nlohmann::json swapped = h;
  swapped["__metadata__"]["crc32c:mask"] = h["__metadata__"]["crc32c:model.0.bias"];
  EXPECT_TRUE(has(load_error(with_header(good, swapped)), "tensor 'mask' is damaged"));
}

TEST_F(Checksums, SavingRefusesMetadataKeysThatWouldPoseAsChecksums) {
  try {
    save_safetensors(path("x.safetensors"), {{"w", ones({2})}}, {{"crc32c:w", "00000000"}});
    ADD_FAILURE() << "saved";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "metadata key 'crc32c:w'")) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path("x.safetensors")));
}

// The file stays a safetensors file: a reader written to the format's spec (and Python's
// safetensors, when /usr/bin/python3 has it) reads every tensor and the string metadata.
TEST_F(Checksums, PythonReadsTheFileToTheSpec) {
  if (!std::filesystem::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  const std::string p = file();
  const std::string script = std::string(EMBER_REFCASES_DIR) + "/../core/safetensors_spec_reader.py";
  FILE* pipe = ::popen(("/usr/bin/python3 " + script + " " + p + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  const int status = ::pclose(pipe);
  EXPECT_EQ(status, 0) << out;
  EXPECT_TRUE(has(out, "spec reader: 5 tensors, 7 metadata strings, crc32c verified")) << out;
}

}  // namespace
}  // namespace ember
