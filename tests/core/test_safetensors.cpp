// safetensors round trips, atomic writes, and every kind of damaged file giving an
// ember::Error that names the file and the problem.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "ember.h"
#include "tests/core/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using namespace ember;

class Safetensors : public test::TempDirTest {
 protected:
  void expect_load_error(const std::string& p, const std::string& what) {
    try {
      load_safetensors(p);
      ADD_FAILURE() << "expected an error containing '" << what << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "the message should name the file: " << e.what();
    }
  }
  // A valid file with one F32 tensor "w" of shape [2, 3].
  std::string valid_file() {
    std::string p = path("valid.safetensors");
    save_safetensors(p, {{"w", arange(0, 6, 1).view({2, 3})}});
    return p;
  }
};

TEST_F(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  std::vector<std::pair<std::string, Tensor>> ts;
  const DType dtypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kInt32, kUInt8, kBool};
  for (DType t : dtypes) ts.emplace_back(std::string(dtype_name(t)), arange(0, 12, 1).view({3, 4}).to(t));
  ts.emplace_back("scalar", scalar_tensor(2.5, kFloat64));
  ts.emplace_back("empty", zeros({0, 5}));
  ts.emplace_back("strided", arange(0, 12, 1).view({3, 4}).t());  // saved contiguous
  save_safetensors(path("a.safetensors"), ts, {{"epoch", "3"}, {"note", "hello"}});

  SafetensorsFile f = load_safetensors(path("a.safetensors"));
  ASSERT_EQ(f.tensors.size(), ts.size());
  for (const auto& [name, t] : ts) {
    SCOPED_TRACE(name);
    const Tensor& got = f.at(name);
    EXPECT_EQ(got.dtype(), t.dtype());
    EXPECT_EQ(got.shape(), t.shape());
    EXPECT_EQ(got.to_vector<double>(), t.to_vector<double>());
  }
  EXPECT_EQ(f.metadata.at("epoch"), "3");
  EXPECT_EQ(f.metadata.at("note"), "hello");
  EXPECT_TRUE(f.contains("int64"));
  EXPECT_FALSE(f.contains("nope"));
  EXPECT_THROW(f.at("nope"), Error);
}

TEST_F(Safetensors, LayoutIsTheStandardOne) {
  std::string bytes = read(valid_file());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u) << "data must start 8-byte aligned";
  std::string header = bytes.substr(8, n);
  EXPECT_NE(header.find("\"dtype\":\"F32\""), std::string::npos) << header;
  EXPECT_NE(header.find("\"data_offsets\":[0,24]"), std::string::npos) << header;
  EXPECT_EQ(bytes.size(), 8 + n + 24);
}

TEST_F(Safetensors, OverwriteIsAtomicAndLeavesNoTemporaryFile) {
  std::string p = valid_file();
  save_safetensors(p, {{"w", ones({4})}});
  EXPECT_EQ(load_safetensors(p).at("w").shape(), Shape({4}));
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
  EXPECT_EQ(files, 1);
}

TEST_F(Safetensors, FailedSaveKeepsTheOldFile) {
  std::string p = valid_file();
  std::string before = read(p);
  EXPECT_THROW(save_safetensors(p, {{"a", ones({2})}, {"a", ones({2})}}), Error);  // duplicate name
  EXPECT_THROW(save_safetensors(p, {{"u", Tensor()}}), Error);
  EXPECT_EQ(read(p), before);
  EXPECT_THROW(save_safetensors(path("no/such/dir/x.safetensors"), {{"w", ones({1})}}), Error);
}

TEST_F(Safetensors, TruncatedFile) {
  std::string bytes = read(valid_file());
  write(path("t1"), bytes.substr(0, bytes.size() - 4));
  expect_load_error(path("t1"), "outside the data section");
  write(path("t2"), bytes.substr(0, 20));
  expect_load_error(path("t2"), "declares a header of");
  write(path("t3"), bytes.substr(0, 5));
  expect_load_error(path("t3"), "too short");
}

TEST_F(Safetensors, FlippedHeaderByte) {
  std::string bytes = read(valid_file());
  bytes[8] = '[';  // the header's opening brace
  write(path("f"), bytes);
  expect_load_error(path("f"), "not valid JSON");
}

TEST_F(Safetensors, WrongShapeOrDtype) {
  std::string bytes = read(valid_file());
  std::string shape_bad = bytes, dtype_bad = bytes;
  shape_bad.replace(shape_bad.find("[2,3]"), 5, "[3,3]");
  write(path("s"), shape_bad);
  expect_load_error(path("s"), "needs 36 bytes but data_offsets give 24");
  dtype_bad.replace(dtype_bad.find("F32"), 3, "Q32");
  write(path("d"), dtype_bad);
  expect_load_error(path("d"), "unsupported dtype 'Q32'");
}

TEST_F(Safetensors, TrailingBytesAreRejected) {
  write(path("x"), read(valid_file()) + "junk");
  expect_load_error(path("x"), "the tensors cover 24 bytes but the data section has 28");
}

// A shape whose byte count wraps around 2^64 (here to 0) passed the size
// check and then asked empty() for an impossible tensor.
TEST_F(Safetensors, ShapesWhoseSizeOverflowsAreRejected) {
  auto file = [](const std::string& shape) {
    std::string h = R"({"a":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,0]}})";
    h.append((8 - h.size() % 8) % 8, ' ');
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>(uint64_t(h.size()) >> (8 * i));
    return len + h;
  };
  write(path("wrap.safetensors"), file("[4611686018427387904,4]"));
  expect_load_error(path("wrap.safetensors"), "too large");
  write(path("big.safetensors"), file("[18446744073709551615,0]"));
  expect_load_error(path("big.safetensors"), "too large");
  EXPECT_THROW(parse_safetensors(file("[4611686018427387904,4]"), "in memory"), Error);
  // No bytes (a zero dim) but strides beyond int64 for the other dims.
  EXPECT_THROW(parse_safetensors(file("[0,4294967296,4294967296]"), "in memory"), Error);
  EXPECT_EQ(parse_safetensors(file("[0,3]"), "in memory").at("a").shape(), (Shape{0, 3}));
}

TEST_F(Safetensors, MissingFile) { expect_load_error(path("missing.safetensors"), "cannot open"); }

TEST(SafetensorsRefcases, ReadsThePyTorchFiles) {
  SafetensorsFile f = load_safetensors(std::string(EMBER_REFCASES_DIR) + "/matmul.safetensors");
  EXPECT_EQ(f.metadata.at("num_cases"), "17");
  EXPECT_TRUE(f.contains("case0.out"));
}

}  // namespace
