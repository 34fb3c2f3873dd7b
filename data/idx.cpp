#include "data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "core/atomic_file.h"
#include "core/ops.h"

namespace ember::data {
namespace {

constexpr unsigned char kUByte = 0x08;
constexpr int kMaxDims = 4;

// The whole of a gzip stream (all its members), inflated. Deflate expands at most about
// 1032:1, so the output is bounded by the input's size; no separate cap is needed.
std::string gunzip(const std::string& bytes, const std::string& name) {
  z_stream z{};
  EMBER_CHECK(inflateInit2(&z, 16 + MAX_WBITS) == Z_OK, "read_idx: zlib cannot start inflating '", name, "'");
  struct Ender {
    z_stream* z;
    ~Ender() { inflateEnd(z); }
  } ender{&z};
  std::string out;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  EMBER_CHECK(bytes.size() == z.avail_in, "read_idx: '", name, "' is too large (", bytes.size(), " bytes)");
  char buf[1 << 16];
  for (;;) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    const int r = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
    if (r == Z_STREAM_END) {
      if (z.avail_in == 0) return out;
      EMBER_CHECK(inflateReset(&z) == Z_OK, "read_idx: '", name, "': cannot read the next gzip member");
      continue;
    }
    EMBER_CHECK(r == Z_OK, "read_idx: '", name,
                "' is not valid gzip data: ", z.msg ? z.msg : (z.avail_in == 0 ? "truncated" : "corrupt"));
  }
}

}  // namespace

Tensor read_idx(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  EMBER_CHECK(f != nullptr, "read_idx: cannot open '", path, "': ", std::strerror(errno));
  std::string bytes;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.append(buf, n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  EMBER_CHECK(!failed, "read_idx: cannot read '", path, "'");
  return read_idx_bytes(bytes, path);
}

Tensor read_idx_bytes(const std::string& file_bytes, const std::string& name) {
  const bool gz = file_bytes.size() >= 2 && uint8_t(file_bytes[0]) == 0x1f && uint8_t(file_bytes[1]) == 0x8b;
  const std::string inflated = gz ? gunzip(file_bytes, name) : std::string();
  const std::string& bytes = gz ? inflated : file_bytes;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t pos = 0;
  EMBER_CHECK(bytes.size() >= 4, "read_idx: '", name, "' is too short for an IDX header");
  const unsigned char* magic = p;
  pos = 4;
  EMBER_CHECK(magic[0] == 0 && magic[1] == 0, "read_idx: '", name, "' is not an IDX file (magic number starts ",
              int(magic[0]), " ", int(magic[1]), ", expected 0 0)");
  EMBER_CHECK(magic[2] == kUByte, "read_idx: '", name, "' holds data of type 0x", std::hex, int(magic[2]),
              ", only unsigned bytes (0x08) are supported");
  const int ndims = magic[3];
  EMBER_CHECK(ndims >= 1 && ndims <= kMaxDims, "read_idx: '", name, "' declares ", ndims, " dims (expected 1 to ",
              kMaxDims, ")");
  Shape shape;
  // total is the element count; span is the product of the dims counted as at least 1,
  // which bounds the strides: with a zero dim total stays 0 while the others can still
  // be 2^32 each, and strides of their product overflow int64.
  uint64_t total = 1, span = 1;
  for (int d = 0; d < ndims; ++d) {
    EMBER_CHECK(bytes.size() >= pos + 4, "read_idx: '", name, "' ends inside its header (dim ", d, ")");
    const unsigned char* b = p + pos;
    pos += 4;
    const uint32_t n = (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | b[3];
    shape.push_back(n);
    total *= n;  // <= span, which the check keeps below 2^34
    // Checked for wrapping too: a span near 2^34 times a dim near 2^32 passes 2^64.
    EMBER_CHECK(!__builtin_mul_overflow(span, std::max<uint64_t>(n, 1), &span) && span <= (uint64_t(1) << 34),
                "read_idx: '", name, "' declares an implausible size ", shape_str(shape));
  }
  // Checked before allocating, so that a header that lies costs nothing.
  const uint64_t got = bytes.size() - pos;
  EMBER_CHECK(got >= total, "read_idx: '", name, "' is truncated: dims ", shape_str(shape), " need ", total,
              " bytes of data, the file has ", got);
  EMBER_CHECK(got == total, "read_idx: '", name, "' has data beyond the ", total, " bytes its dims ",
              shape_str(shape), " describe");
  Tensor t = empty(shape, {kUInt8, Device::cpu()});
  if (total > 0) std::memcpy(t.data_ptr(), p + pos, total);
  return t;
}

void write_idx(const std::string& path, const Tensor& t, bool gzip) {
  EMBER_CHECK(t.dtype() == kUInt8, "write_idx: expects a uint8 tensor, got ", dtype_name(t.dtype()));
  EMBER_CHECK(t.dim() >= 1 && t.dim() <= kMaxDims, "write_idx: expects 1 to ", kMaxDims, " dims, got ",
              shape_str(t.shape()));
  std::vector<unsigned char> bytes = {0, 0, kUByte, static_cast<unsigned char>(t.dim())};
  for (int64_t n : t.shape())
    for (int s = 24; s >= 0; s -= 8) bytes.push_back(static_cast<unsigned char>(uint32_t(n) >> s));
  const Tensor c = t.contiguous().to(Device::cpu());  // a device tensor is read through a copy
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  bytes.insert(bytes.end(), p, p + c.numel());

  AtomicFile file(path, "write_idx");
  if (!gzip) {
    file.write(bytes.data(), bytes.size());
  } else {
    EMBER_CHECK(bytes.size() <= UINT32_MAX, "write_idx: '", path, "': ", bytes.size(),
                " bytes are too many to compress in one piece");
    z_stream z{};
    EMBER_CHECK(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK,
                "write_idx: zlib cannot start compressing '", path, "'");
    std::string out(deflateBound(&z, static_cast<uLong>(bytes.size())), '\0');
    z.next_in = bytes.data();
    z.avail_in = static_cast<uInt>(bytes.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    const int r = deflate(&z, Z_FINISH);
    out.resize(z.total_out);
    deflateEnd(&z);
    EMBER_CHECK(r == Z_STREAM_END && z.avail_in == 0, "write_idx: zlib cannot compress '", path, "'");
    file.write(out);
  }
  file.commit();
}

}  // namespace ember::data
