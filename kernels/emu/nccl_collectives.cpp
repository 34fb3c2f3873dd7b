// The emulated NCCL's collectives (nccl_collectives.h).
#include "kernels/emu/nccl_collectives.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/half.h"

namespace ember::emu::nccl {
namespace {

// The values are combined in Compute<T>::type: float for the 16-bit floats.
template <class T>
struct Compute {
  using type = T;
  static T in(T v) { return v; }
  static T out(T v) { return v; }
};
template <>
struct Compute<ember::Half> {
  using type = float;
  static float in(ember::Half v) { return float(v); }
  static ember::Half out(float v) { return ember::Half(v); }
};
template <>
struct Compute<ember::BFloat16> {
  using type = float;
  static float in(ember::BFloat16 v) { return float(v); }
  static ember::BFloat16 out(float v) { return ember::BFloat16(v); }
};

template <class A>
A combine(A a, A b, ncclRedOp_t op) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;  // wraps as the device's integers do, without UB
    switch (op) {
      case ncclProd: return static_cast<A>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      case ncclMax: return std::max(a, b);
      case ncclMin: return std::min(a, b);
      default: return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));  // sum, avg
    }
  } else {
    switch (op) {
      case ncclProd: return a * b;
      case ncclMax: return std::fmax(a, b);
      case ncclMin: return std::fmin(a, b);
      default: return a + b;
    }
  }
}

// dst[i] = src[0][i] op src[1][i] op ... (in rank order), for i < count; /n for ncclAvg.
template <class T>
void reduce_typed(void* dst, const char* const* src, int n, size_t count, ncclRedOp_t op) {
  using C = Compute<T>;
  using A = typename C::type;
  auto load = [](const char* p, size_t i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    return C::in(v);
  };
  for (size_t i = 0; i < count; ++i) {
    A acc = load(src[0], i);
    for (int r = 1; r < n; ++r) acc = combine<A>(acc, load(src[r], i), op);
    if (op == ncclAvg) acc = static_cast<A>(acc / static_cast<A>(n));
    const T v = C::out(acc);
    std::memcpy(static_cast<char*>(dst) + i * sizeof(T), &v, sizeof(T));
  }
}

}  // namespace

TypeInfo type_info(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return {1, reduce_typed<int8_t>};
    case ncclUint8: return {1, reduce_typed<uint8_t>};
    case ncclInt32: return {4, reduce_typed<int32_t>};
    case ncclUint32: return {4, reduce_typed<uint32_t>};
    case ncclInt64: return {8, reduce_typed<int64_t>};
    case ncclUint64: return {8, reduce_typed<uint64_t>};
    case ncclFloat16: return {2, reduce_typed<ember::Half>};
    case ncclFloat32: return {4, reduce_typed<float>};
    case ncclFloat64: return {8, reduce_typed<double>};
    case ncclBfloat16: return {2, reduce_typed<ember::BFloat16>};
    default: return {0, nullptr};
  }
}

bool all_reduce(State& s, const Call& c, const TypeInfo& t) {
  const size_t per_chunk = s.slot_bytes / t.size;
  std::vector<const char*> src(static_cast<size_t>(s.nranks));
  for (size_t done = 0; done < c.count; done += per_chunk) {
    const size_t n = std::min(per_chunk, c.count - done);
    std::memcpy(s.slot(s.rank), static_cast<const char*>(c.send) + done * t.size, n * t.size);
    if (!s.barrier()) return false;
    const bool mine = c.root < 0 || c.root == s.rank;  // ncclReduce: only the root's output
    if (mine) {
      for (int r = 0; r < s.nranks; ++r) src[static_cast<size_t>(r)] = s.slot(r);
      t.reduce(static_cast<char*>(c.recv) + done * t.size, src.data(), s.nranks, n, c.op);
    }
    if (!s.barrier()) return false;
  }
  return true;
}

bool broadcast(State& s, const Call& c, const TypeInfo& t) {
  const size_t per_chunk = s.slot_bytes / t.size;
  for (size_t done = 0; done < c.count; done += per_chunk) {
    const size_t bytes = std::min(per_chunk, c.count - done) * t.size;
    if (s.rank == c.root) std::memcpy(s.slot(c.root), static_cast<const char*>(c.send) + done * t.size, bytes);
    if (!s.barrier()) return false;
    std::memcpy(static_cast<char*>(c.recv) + done * t.size, s.slot(c.root), bytes);
    if (!s.barrier()) return false;
  }
  return true;
}

// count is the count each rank sends; rank r's part lands at recv + r * count.
bool all_gather(State& s, const Call& c, const TypeInfo& t) {
  const size_t per_chunk = s.slot_bytes / t.size;
  for (size_t done = 0; done < c.count; done += per_chunk) {
    const size_t bytes = std::min(per_chunk, c.count - done) * t.size;
    std::memcpy(s.slot(s.rank), static_cast<const char*>(c.send) + done * t.size, bytes);
    if (!s.barrier()) return false;
    for (int r = 0; r < s.nranks; ++r)
      std::memcpy(static_cast<char*>(c.recv) + (static_cast<size_t>(r) * c.count + done) * t.size, s.slot(r), bytes);
    if (!s.barrier()) return false;
  }
  return true;
}

// count is the count each rank receives: part r of every rank's send, reduced.
bool reduce_scatter(State& s, const Call& c, const TypeInfo& t) {
  const auto ranks = static_cast<size_t>(s.nranks);
  const size_t per_chunk = s.slot_bytes / (t.size * ranks);
  std::vector<const char*> src(ranks);
  for (size_t done = 0; done < c.count; done += per_chunk) {
    const size_t n = std::min(per_chunk, c.count - done), bytes = n * t.size;
    for (size_t part = 0; part < ranks; ++part)  // the slot holds this chunk of every part
      std::memcpy(s.slot(s.rank) + part * bytes, static_cast<const char*>(c.send) + (part * c.count + done) * t.size, bytes);
    if (!s.barrier()) return false;
    for (int r = 0; r < s.nranks; ++r) src[static_cast<size_t>(r)] = s.slot(r) + static_cast<size_t>(s.rank) * bytes;
    t.reduce(static_cast<char*>(c.recv) + done * t.size, src.data(), s.nranks, n, c.op);
    if (!s.barrier()) return false;
  }
  return true;
}

}  // namespace ember::emu::nccl
