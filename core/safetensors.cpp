// safetensors I/O. Note [safetensors validation]: a file is trusted only after its
// header parses, every tensor's dtype is known, its byte range equals
// numel * element size, lies inside the data section, the ranges tile the section
// without gaps or overlaps (as the format requires), and each tensor's bytes match its
// checksum (Note [Tensor checksums] in safetensors.h). Errors name the file.
//
// Note [Checksum cost]. CRC-32C with SSE4.2's crc32 instruction, one stream of 8 bytes
// per instruction, against zlib's crc32 (zlib 1.2.13, tables), over the CNN's Adam
// checkpoint (5.06 MB): see docs/reliability.md for the figures; the instruction
// checks the whole checkpoint in a fraction of the time reading it takes.
#include "core/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"
#include "core/atomic_file.h"
#include "core/checksum.h"
#include "core/storage.h"

namespace ember {
namespace {

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kDTypes[] = {{"F64", kFloat64}, {"F32", kFloat32}, {"F16", kFloat16}, {"BF16", kBFloat16},
                                 {"I64", kInt64},   {"I32", kInt32},   {"U8", kUInt8},    {"BOOL", kBool}};

constexpr uint64_t kMaxHeader = 100u << 20;  // the reference implementation's limit
const std::string kCrcPrefix = "crc32c:";   // Note [Tensor checksums]

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

bool parse_hex32(const std::string& s, uint32_t& v) {
  if (s.size() != 8) return false;
  v = 0;
  for (char c : s) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return false;
    v = v << 4 | static_cast<uint32_t>(d);
  }
  return true;
}

// Once per file and process: the note for a file that carries no checksums.
void note_unverified(const std::string& path) {
  static std::mutex mu;
  static std::set<std::string> noted;
  std::lock_guard lock(mu);
  if (!noted.insert(path).second) return;
  std::fprintf(stderr, "note: '%s' carries no tensor checksums (written by another tool, or by ember before "
               "them); loaded without verifying its bytes\n", path.c_str());
}
const char* st_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d.name;
  return "?";
}

}  // namespace

const Tensor& SafetensorsFile::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  std::string keys;
  for (size_t i = 0; i < tensors.size() && i < 8; ++i) keys += (i ? ", " : "") + tensors[i].first;
  if (tensors.size() > 8) keys += ", ...";
  EMBER_FAIL("safetensors: no tensor named '", name, "' (the file has ", tensors.size(), ": ", keys, ")");
}

bool SafetensorsFile::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(), [&](const auto& p) { return p.first == name; });
}

SafetensorsFile load_safetensors(const std::string& path) {
  SafetensorsFile f = parse_safetensors(read_file(path, "load_safetensors"), path);
  if (!f.checksummed && !f.tensors.empty()) note_unverified(path);
  return f;
}

SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& path) {
  const uint64_t file_size = bytes.size();
  EMBER_CHECK(file_size >= 8, "load_safetensors: '", path, "' is ", file_size, " bytes, too short for a header");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[i]);
  EMBER_CHECK(header_len <= kMaxHeader && header_len <= file_size - 8, "load_safetensors: '", path,
              "' declares a header of ", header_len, " bytes but the file has ", file_size, " bytes (truncated or not safetensors)");
  const std::string header = bytes.substr(8, header_len);

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception& e) {
    EMBER_FAIL("load_safetensors: the header of '", path, "' is not valid JSON: ", e.what());
  }
  EMBER_CHECK(j.is_object(), "load_safetensors: the header of '", path, "' is not a JSON object");

  const uint64_t data_start = 8 + header_len, data_size = file_size - data_start;
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  SafetensorsFile out;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      EMBER_CHECK(v.is_object(), "load_safetensors: '", path, "': __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        EMBER_CHECK(m.value().is_string(), "load_safetensors: '", path, "': metadata value '", m.key(), "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) { EMBER_FAIL("load_safetensors: '", path, "': tensor '", name, "': ", what); };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      bad("needs dtype, shape and data_offsets");
    if (!v["dtype"].is_string()) bad("dtype is not a string");
    const std::string dt = v["dtype"].get<std::string>();
    const DTypeName* found = nullptr;
    for (const auto& d : kDTypes)
      if (dt == d.name) found = &d;
    if (!found) bad("unsupported dtype '" + dt + "'");
    Entry e{name, found->dtype, {}, 0, 0};
    if (!v["shape"].is_array()) bad("shape is not a list");
    // numel * element size in uint64 with overflow checks: a dim beyond int64 or a
    // product that wraps would otherwise pass the size check below with a wrong shape.
    // span, the product of the dims counted as at least 1, bounds the strides, which a
    // zero dim elsewhere would not keep from overflowing.
    uint64_t want = element_size(found->dtype), span = want;
    for (const auto& s : v["shape"]) {
      if (!s.is_number_unsigned()) bad("shape holds a value that is not a non-negative integer");
      const uint64_t d = s.get<uint64_t>();
      if (d > uint64_t(INT64_MAX) || __builtin_mul_overflow(want, d, &want) ||
          __builtin_mul_overflow(span, std::max<uint64_t>(d, 1), &span) || span > uint64_t(INT64_MAX))
        bad(detail::str("shape ", v["shape"].dump(), " of ", dt, " is too large"));
      e.shape.push_back(static_cast<int64_t>(d));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad("data_offsets must be two non-negative integers");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_size)
      bad(detail::str("data_offsets [", e.begin, ", ", e.end, "] lie outside the data section of ", data_size,
                      " bytes (truncated file?)"));
    if (e.end - e.begin != want)
      bad(detail::str("shape ", shape_str(e.shape), " of ", dt, " needs ", want, " bytes but data_offsets give ",
                      e.end - e.begin));
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t pos = 0;
  for (const Entry& e : entries) {
    EMBER_CHECK(e.begin == pos, "load_safetensors: '", path, "': tensor '", e.name, "' starts at byte ", e.begin,
                " of the data section, expected ", pos, " (gap or overlap)");
    pos = e.end;
  }
  EMBER_CHECK(pos == data_size, "load_safetensors: '", path, "': the tensors cover ", pos,
              " bytes but the data section has ", data_size);

  // Note [Tensor checksums]: all or none, each for a tensor of the file, each matching.
  std::map<std::string, uint32_t> crcs;
  for (auto it = out.metadata.begin(); it != out.metadata.end();) {
    if (it->first.rfind(kCrcPrefix, 0) != 0) {
      ++it;
      continue;
    }
    const std::string name = it->first.substr(kCrcPrefix.size());
    uint32_t v = 0;
    EMBER_CHECK(parse_hex32(it->second, v), "load_safetensors: '", path, "': the checksum of tensor '", name,
                "' is '", it->second, "', not 8 hex digits");
    EMBER_CHECK(std::any_of(entries.begin(), entries.end(), [&](const Entry& e) { return e.name == name; }),
                "load_safetensors: '", path, "' has a checksum for a tensor '", name, "' that it does not hold");
    crcs[name] = v;
    it = out.metadata.erase(it);
  }
  if (!crcs.empty()) {
    for (const Entry& e : entries) {
      const auto c = crcs.find(e.name);
      EMBER_CHECK(c != crcs.end(), "load_safetensors: '", path, "': tensor '", e.name,
                  "' has no checksum while the others have one (the header was altered)");
      const uint32_t got = crc32c(bytes.data() + data_start + e.begin, e.end - e.begin);
      EMBER_CHECK(got == c->second, "load_safetensors: '", path, "': tensor '", e.name,
                  "' is damaged: its bytes have CRC-32C ", hex32(got), " but the file records ", hex32(c->second),
                  " (the file changed after it was written)");
    }
    out.checksummed = true;
  }
  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, {e.dtype, Device::cpu()});
    if (e.end > e.begin) std::memcpy(t.data_ptr(), bytes.data() + data_start + e.begin, e.end - e.begin);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json j = nlohmann::json::object();
  std::map<std::string, std::string> meta = metadata;
  for (const auto& [key, value] : metadata)
    EMBER_CHECK(key.rfind(kCrcPrefix, 0) != 0, "save_safetensors: metadata key '", key, "': keys beginning with '",
                kCrcPrefix, "' hold the tensors' checksums");
  std::vector<Tensor> contiguous;
  uint64_t pos = 0;
  for (const auto& [name, t] : tensors) {
    EMBER_CHECK(name != "__metadata__", "save_safetensors: '__metadata__' cannot name a tensor");
    EMBER_CHECK(!j.contains(name), "save_safetensors: the name '", name, "' appears twice");
    EMBER_CHECK(t.defined(), "save_safetensors: tensor '", name, "' is undefined");
    EMBER_CHECK(!t.device().is_meta(), "save_safetensors: tensor '", name, "' has no data: it is on the meta device");
    const uint64_t n = static_cast<uint64_t>(t.numel() * t.element_size());
    j[name] = {{"dtype", st_name(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {pos, pos + n}}};
    pos += n;
    contiguous.push_back(t.detach().contiguous().to(Device::cpu()));  // a device tensor: copied, waiting for its writers
    meta[kCrcPrefix + name] = hex32(crc32c(contiguous.back().data_ptr(), n));
  }
  if (!meta.empty()) j["__metadata__"] = meta;
  std::string header = j.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // data starts 8-byte aligned

  AtomicFile file(path, "save_safetensors");
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(header.size()) >> (8 * i));
  file.write(len, 8);
  file.write(header);
  for (const Tensor& t : contiguous) file.write(t.data_ptr(), static_cast<size_t>(t.numel() * t.element_size()));
  file.commit();
}

}  // namespace ember
