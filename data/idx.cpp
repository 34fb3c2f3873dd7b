#include "data/idx.h"

#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "core/ops.h"

namespace ember::data {
namespace {

constexpr unsigned char kUByte = 0x08;
constexpr int kMaxDims = 4;

// Reads exactly n bytes; returns how many it got.
size_t read_fully(gzFile f, void* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
    const int r = gzread(f, static_cast<char*>(buf) + got, chunk);
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

}  // namespace

Tensor read_idx(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  EMBER_CHECK(f != nullptr, "read_idx: cannot open '", path, "': ", std::strerror(errno));
  struct Closer {
    gzFile f;
    ~Closer() { gzclose(f); }
  } closer{f};
  unsigned char magic[4];
  EMBER_CHECK(read_fully(f, magic, 4) == 4, "read_idx: '", path, "' is too short for an IDX header");
  EMBER_CHECK(magic[0] == 0 && magic[1] == 0, "read_idx: '", path, "' is not an IDX file (magic number starts ",
              int(magic[0]), " ", int(magic[1]), ", expected 0 0)");
  EMBER_CHECK(magic[2] == kUByte, "read_idx: '", path, "' holds data of type 0x", std::hex, int(magic[2]),
              ", only unsigned bytes (0x08) are supported");
  const int ndims = magic[3];
  EMBER_CHECK(ndims >= 1 && ndims <= kMaxDims, "read_idx: '", path, "' declares ", ndims, " dims (expected 1 to ",
              kMaxDims, ")");
  Shape shape;
  uint64_t total = 1;
  for (int d = 0; d < ndims; ++d) {
    unsigned char b[4];
    EMBER_CHECK(read_fully(f, b, 4) == 4, "read_idx: '", path, "' ends inside its header (dim ", d, ")");
    const uint32_t n = (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | b[3];
    shape.push_back(n);
    total *= n;
    EMBER_CHECK(total <= (uint64_t(1) << 34), "read_idx: '", path, "' declares an implausible size ", shape_str(shape));
  }
  Tensor t = empty(shape, kUInt8);
  const size_t got = read_fully(f, t.data_ptr(), total);
  EMBER_CHECK(got == total, "read_idx: '", path, "' is truncated: dims ", shape_str(shape), " need ", total,
              " bytes of data, the file has ", got);
  unsigned char extra;
  EMBER_CHECK(read_fully(f, &extra, 1) == 0, "read_idx: '", path, "' has data beyond the ", total, " bytes its dims ",
              shape_str(shape), " describe");
  return t;
}

void write_idx(const std::string& path, const Tensor& t, bool gzip) {
  EMBER_CHECK(t.dtype() == kUInt8, "write_idx: expects a uint8 tensor, got ", dtype_name(t.dtype()));
  EMBER_CHECK(t.dim() >= 1 && t.dim() <= kMaxDims, "write_idx: expects 1 to ", kMaxDims, " dims, got ",
              shape_str(t.shape()));
  std::vector<unsigned char> bytes = {0, 0, kUByte, static_cast<unsigned char>(t.dim())};
  for (int64_t n : t.shape())
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<unsigned char>(uint32_t(n) >> s));
  Tensor c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  bytes.insert(bytes.end(), p, p + c.numel());

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  gzFile f = gzopen(tmp.c_str(), gzip ? "wb" : "wbT");  // T: write without compression
  EMBER_CHECK(f != nullptr, "write_idx: cannot create '", tmp, "': ", std::strerror(errno));
  const bool ok = gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size());
  const bool closed = gzclose(f) == Z_OK;
  if (!ok || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    EMBER_FAIL("write_idx: cannot write '", path, "'");
  }
}

}  // namespace ember::data
