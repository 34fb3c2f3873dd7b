// The emulator's models of the tensor-core instructions (kernels/cuda/tensor_core.cuh is
// the interface kernels use, and states the PTX fragment layouts implemented here):
//
// - mma.sync m16n8k16 / m16n8k8, bf16 or f16 inputs, f32 accumulators, and ldmatrix
//   .x1/.x2/.x4 (.trans) are warp collectives: each lane publishes its operands (or row
//   address) in its warp's slot of a per-block scratch area, __syncwarp, reads the others'
//   per the layout, __syncwarp again before the slot is reused. .aligned instructions need
//   all 32 lanes of the warp: a partial warp, or an unaligned row address, is an error.
//   The products of 16-bit values are exact in float; the model adds them and C in double
//   and rounds once, where the hardware keeps some extra bits, so a kernel's tolerance must
//   cover one f32 rounding per mma (it does for any f32-accumulating reference).
// - cp.async: each thread's copies wait in its queue, tagged with their commit group, and
//   land (source bytes, zero fill past src_bytes) only at the cp_async_wait<N> that retires
//   their group, the latest moment PTX allows. A kernel that reads a stage before waiting
//   for it reads whatever was there (dynamic shared memory starts as 0xFF bytes, NaN), as
//   it may on a GPU. Copies never waited for are dropped when the thread's next block starts.
//
// For the checks (kernels/emu/check.h): the models' bookkeeping (queues, exchange slots)
// runs inside ModelScopes, out of the checks, and each instruction tells them what it
// accesses for the kernel (model.h): a cp.async writes its shared bytes as a pending write
// when issued (PTX lets it land any time until its wait_group) and as a write by the issuing
// thread when its wait_group lands it, reading its global bytes then; an ldmatrix reads the
// 16-byte row each lane names. For the profile counters (profile.h), each instruction is
// what the GPU issues, lane by lane (profile_read/profile_write, model.h): ldmatrix.xN a
// shared load of the named rows, cp.async at issue a global load of its source bytes (.cg,
// past the L1, for 16 bytes) and a shared store of its destination, mma.sync nothing.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "kernels/emu/emu.h"
#include "kernels/emu/model.h"

namespace ember::emu::detail {
// Blocks the calling OS thread has started (block.cpp): per-block state kept outside
// shared memory, as the cp.async queues are, knows a new block by it.
uint64_t block_serial();
}  // namespace ember::emu::detail

namespace ember::emu::tensor_core {

using SharedAddr = uintptr_t;

inline SharedAddr shared_address(const void* p) { return reinterpret_cast<SharedAddr>(p); }

namespace detail {

inline unsigned linear_thread() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
inline unsigned block_threads() { return blockDim.x * blockDim.y * blockDim.z; }

struct Copy {
  unsigned char* dst;
  const unsigned char* src;
  int bytes, src_bytes;
  int64_t group;  // -1: not committed yet
};
struct ThreadCopies {
  std::vector<Copy> pending;
  int64_t committed = 0;
};

// This thread's cp.async queue; every queue of the block is emptied when a new block starts.
inline ThreadCopies& thread_copies() {
  static thread_local uint64_t serial = 0;
  static thread_local std::vector<ThreadCopies> queues;
  if (serial != ::ember::emu::detail::block_serial()) {
    serial = ::ember::emu::detail::block_serial();
    queues.resize(block_threads());
    for (ThreadCopies& q : queues) q.pending.clear(), q.committed = 0;
  }
  return queues[linear_thread()];
}

// Per-warp exchange slots: 6 words per lane (an mma's A and B registers), 32 warps.
inline uint64_t (&warp_slots(unsigned warp))[32][6] {
  static thread_local uint64_t slots[32][32][6];
  return slots[warp];
}

// The calling lane's warp and lane; the whole warp must be present.
inline void warp_lane(const char* op, unsigned& warp, unsigned& lane) {
  const unsigned tid = linear_thread();
  warp = tid / 32, lane = tid % 32;
  EMBER_CHECK((warp + 1) * 32 <= block_threads(), op, ": warp ", warp, " has ", block_threads() - warp * 32,
              " threads; the .aligned instruction needs all 32 lanes");
}

template <class T>
float element(uint64_t reg, int half) {
  const uint16_t bits = uint16_t(reg >> (16 * half));
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return std::bit_cast<float>(uint32_t(bits) << 16);
  } else {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
  }
}

// D[row][col] += sum_k A[row][k] B[k][col] for the lane's four outputs, reading A and B
// from the warp's slots: A in slots 0..3 (k16) or 0..1 (k8), B in slots 4, 5.
template <class T, int K>
void mma(float (&d)[4]) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "mma.sync takes bf16 or f16");
  unsigned warp, lane;
  warp_lane("mma.sync", warp, lane);
  auto& s = warp_slots(warp);
  const int g = int(lane / 4), t = int(lane % 4);
  double acc[4];
  for (int h = 0; h < 2; ++h)      // row g + 8 h of D
    for (int c = 0; c < 2; ++c) {  // column 2 t + c
      const int row = g + 8 * h, col = 2 * t + c;
      double sum = d[2 * h + c];
      for (int k = 0; k < K; ++k) {
        // A[row][k]: lane 4 (row % 8) + (k % 8) / 2, register (row / 8) + 2 (k / 8), half k % 2.
        const float av = element<T>(s[4 * (row % 8) + (k % 8) / 2][row / 8 + 2 * (k / 8)], k % 2);
        // B[k][col]: lane 4 col + (k % 8) / 2, register k / 8, half k % 2.
        const float bv = element<T>(s[4 * col + (k % 8) / 2][4 + k / 8], k % 2);
        sum += double(av) * double(bv);
      }
      acc[2 * h + c] = sum;
    }
  for (int i = 0; i < 4; ++i) d[i] = float(acc[i]);
}

}  // namespace detail

template <int kBytes>
void cp_async(SharedAddr dst, const void* src, int src_bytes = kBytes) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
  EMBER_CHECK(src_bytes >= 0 && src_bytes <= kBytes, "cp.async: src-size ", src_bytes, " outside [0, ", kBytes, "]");
  EMBER_CHECK(dst % kBytes == 0 && reinterpret_cast<uintptr_t>(src) % kBytes == 0, "cp.async: ", kBytes,
              "-byte copy between addresses not aligned to ", kBytes);
  ::ember::emu::detail::ModelScope model;
  ::ember::emu::detail::note_pending_write(reinterpret_cast<const void*>(dst), kBytes);
  ::ember::emu::detail::profile_read(src, size_t(src_bytes), kBytes != 16);
  ::ember::emu::detail::profile_write(reinterpret_cast<const void*>(dst), kBytes);
  detail::ThreadCopies& q = detail::thread_copies();
  q.pending.push_back({reinterpret_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), kBytes,
                       src_bytes, -1});
}

inline void cp_async_commit() {
  ::ember::emu::detail::ModelScope model;
  detail::ThreadCopies& q = detail::thread_copies();
  for (detail::Copy& c : q.pending)
    if (c.group < 0) c.group = q.committed;
  ++q.committed;
}

// Lands every committed group of this thread but the kPending most recent.
template <int kPending>
void cp_async_wait() {
  static_assert(kPending >= 0, "cp.async.wait_group takes a count");
  ::ember::emu::detail::ModelScope model;
  detail::ThreadCopies& q = detail::thread_copies();
  size_t kept = 0;
  for (const detail::Copy& c : q.pending) {
    if (c.group >= 0 && c.group < q.committed - kPending) {
      ::ember::emu::detail::note_read(c.src, size_t(c.src_bytes));
      ::ember::emu::detail::note_write(c.dst, size_t(c.bytes));
      if (c.src_bytes > 0) std::memcpy(c.dst, c.src, size_t(c.src_bytes));
      std::memset(c.dst + c.src_bytes, 0, size_t(c.bytes - c.src_bytes));
    } else {
      q.pending[kept++] = c;
    }
  }
  q.pending.resize(kept);
}

template <int kCount, bool kTrans>
void ldmatrix(uint32_t (&r)[kCount], SharedAddr addr) {
  static_assert(kCount == 1 || kCount == 2 || kCount == 4, "ldmatrix loads 1, 2 or 4 matrices");
  unsigned warp, lane;
  detail::warp_lane("ldmatrix", warp, lane);
  EMBER_CHECK(lane >= 8 * kCount || addr % 16 == 0, "ldmatrix: lane ", lane, "'s row address is not 16-byte aligned");
  auto& s = detail::warp_slots(warp);
  {
    ::ember::emu::detail::ModelScope model;
    if (lane < 8 * kCount) {
      ::ember::emu::detail::note_read(reinterpret_cast<const void*>(addr), 16);
      ::ember::emu::detail::profile_read(reinterpret_cast<const void*>(addr), 16);
    }
    s[lane][0] = addr;
  }
  __syncwarp();
  {
    ::ember::emu::detail::ModelScope model;
    const int g = int(lane / 4), t = int(lane % 4);
    auto half = [&](int q, int row, int col) {  // element [row][col] of matrix q
      uint16_t v;
      std::memcpy(&v, reinterpret_cast<const unsigned char*>(s[8 * q + row][0]) + 2 * col, 2);
      return uint32_t(v);
    };
    for (int q = 0; q < kCount; ++q)
      r[q] = kTrans ? half(q, 2 * t, g) | half(q, 2 * t + 1, g) << 16 : half(q, g, 2 * t) | half(q, g, 2 * t + 1) << 16;
  }
  __syncwarp();  // the slots are reused by the next collective
}

template <class T>
void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  unsigned warp, lane;
  detail::warp_lane("mma.sync", warp, lane);
  auto& s = detail::warp_slots(warp);
  {
    ::ember::emu::detail::ModelScope model;
    for (int i = 0; i < 4; ++i) s[lane][i] = a[i];
    s[lane][4] = b[0], s[lane][5] = b[1];
  }
  __syncwarp();
  {
    ::ember::emu::detail::ModelScope model;
    detail::mma<T, 16>(d);
  }
  __syncwarp();
}

template <class T>
void mma_1688(float (&d)[4], const uint32_t (&a)[2], uint32_t b) {
  unsigned warp, lane;
  detail::warp_lane("mma.sync", warp, lane);
  auto& s = detail::warp_slots(warp);
  {
    ::ember::emu::detail::ModelScope model;
    s[lane][0] = a[0], s[lane][1] = a[1], s[lane][4] = b;
  }
  __syncwarp();
  {
    ::ember::emu::detail::ModelScope model;
    detail::mma<T, 8>(d);
  }
  __syncwarp();
}

}  // namespace ember::emu::tensor_core
