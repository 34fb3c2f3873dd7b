// The collective checks that ranks run as threads (test_process_group.cpp) and as
// processes under ember-run (test_collective_processes.cpp): one code path for both.
//
// Every rank issues the same sequence of collectives, rebuilds every rank's input
// (input_value), works out in float64 on the host what each element must come out as,
// and records a mismatch instead of stopping: a rank that left the sequence early would
// leave the others waiting for it. raise_if_any() then fails the rank.
//
// Tolerances (floating sums and averages only; max, min and integers are exact): the
// float inputs are multiples of 2^-6 below 16 in magnitude, so their float64 sums are
// exact. A sum of `size` terms is rounded at most size - 1 times on any path (Gloo's ring
// in the dtype, the emulated NCCL once in float), so it is within gamma_{size-1} times
// the sum of the magnitudes (tests/core/reference.h). An average allows size + 2
// roundings: those, one of the quotient or of 1/size, one of each term multiplied by
// 1/size (NCCL's average of floats on a GPU), and the float64 reference's own quotient.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "comm/process_group.h"
#include "core/ops.h"
#include "tests/core/reference.h"

namespace ember::comm::testing {

inline const std::vector<DType> kAllDTypes = {kBool,    kUInt8,     kInt32,   kInt64,
                                              kFloat16, kBFloat16, kFloat32, kFloat64};
inline const std::vector<ReduceOp> kAllOps = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
inline constexpr int64_t kLarge = int64_t{16} << 20;  // 16 Mi elements

// What one rank found: how many collectives it checked, how many went wrong, the first few.
class CheckReport {
 public:
  void checked() { ++checked_; }
  void fail(const std::string& what) {
    if (failures_++ < 8) first_ += "\n  " + what;
  }
  int64_t collectives() const { return checked_; }
  void raise_if_any(const ProcessGroup& pg) const {
    if (failures_ > 0)
      EMBER_FAIL("rank ", pg.rank(), " of ", pg.size(), ": ", failures_, " failures in ", checked_,
                 " collectives; the first:", first_);
  }

 private:
  int64_t checked_ = 0, failures_ = 0;
  std::string first_;
};

// Inputs repeat every kPeriod elements (a prime, so a block moved by a power-of-two count
// of elements lands on other values), which keeps 16 Mi elements cheap to make and check.
inline constexpr int64_t kPeriod = 1021;

// Rank r's input at element i, as dtype dt stores it. A hash of (i, r), so which rank
// holds the largest value changes from element to element; sums of 4 ranks fit uint8.
inline double input_value(int r, int64_t i, DType dt) {
  uint32_t h = static_cast<uint32_t>(i % kPeriod) * 2654435761u + static_cast<uint32_t>(r + 1) * 40503u;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  switch (dt) {
    case DType::Bool: return h & 1;
    case DType::UInt8: return h % 60;
    case DType::Int32:
    case DType::Int64: return static_cast<int>(h % 101) - 50;
    default: break;
  }
  const float v = static_cast<float>((static_cast<int>(h % 2001) - 1000) / 64.0);
  if (dt == kFloat16) return static_cast<float>(Half(v));  // exact: 10 significant bits at most
  if (dt == kBFloat16) return static_cast<float>(BFloat16(v));  // rounds some to 8
  return v;
}

// Rank r's input: n elements of dtype dt on device d.
inline Tensor input_tensor(int r, int64_t n, DType dt, Device d) {
  std::vector<double> first(std::min(n, kPeriod));
  for (int64_t i = 0; i < static_cast<int64_t>(first.size()); ++i) first[i] = input_value(r, i, dt);
  const TensorOptions host(dt, Device::cpu());
  Tensor t = tensor(first, {static_cast<int64_t>(first.size())}, host);
  if (n > kPeriod) {  // the period, then doubled copies of what is there
    Tensor big = empty({n}, host);
    big.narrow(0, 0, kPeriod).copy_(t);
    char* p = static_cast<char*>(big.data_ptr());
    const int64_t es = big.element_size();
    for (int64_t len = kPeriod; len < n; len *= 2) std::memcpy(p + len * es, p, std::min(len, n - len) * es);
    t = big;
  }
  return t.to(d);
}

struct Want {
  double value, tol;
};

// The reduction of every rank's element i (the tolerances: the comment at the top).
inline Want reduced(ReduceOp op, DType dt, int size, int64_t i) {
  double sum = 0, magnitude = 0, hi = -std::numeric_limits<double>::infinity(), lo = -hi;
  for (int r = 0; r < size; ++r) {
    const double x = input_value(r, i, dt);
    sum += x;
    magnitude += std::abs(x);
    hi = std::max(hi, x);
    lo = std::min(lo, x);
  }
  const bool floating = is_floating(dt);
  const double u = floating ? test::dtype_unit_roundoff(dt) : 0.0;
  switch (op) {
    case ReduceOp::kMax: return {hi, 0};
    case ReduceOp::kMin: return {lo, 0};
    case ReduceOp::kSum: return {sum, test::gamma_n(size - 1, u) * magnitude};
    case ReduceOp::kAvg: break;
  }
  if (!floating) return {std::trunc(sum / size), 0};  // integers: truncated, as C++ and NCCL divide
  return {sum / size, test::gamma_n(size + 2, u) * magnitude / size};
}

template <class T>
double as_double(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return static_cast<float>(v);
  else return static_cast<double>(v);
}

template <class T, class F>
void compare_typed(CheckReport& report, const std::string& what, const Tensor& got, const F& want_at) {
  const T* p = got.data<const T>();
  const int64_t n = got.numel();
  int64_t bad = 0, first = -1;
  for (int64_t k = 0; k < n; ++k) {
    const Want w = want_at(k);
    if (!(std::abs(as_double(p[k]) - w.value) <= w.tol) && bad++ == 0) first = k;  // NaN fails too
  }
  if (bad > 0) {
    const Want w = want_at(first);
    report.fail(detail::str(what, ": ", bad, " of ", n, " elements wrong, the first at ", first, ": ",
                            as_double(p[first]), " where ", w.value, " +- ", w.tol, " was due"));
  }
}

// Compares every element k of `got` with want_at(k), recording one failure for `what`.
template <class F>
void compare(CheckReport& report, const std::string& what, const Tensor& got, const F& want_at) {
  const Tensor c = got.to(Device::cpu());
  switch (c.dtype()) {
    case DType::Bool: return compare_typed<bool>(report, what, c, want_at);
    case DType::UInt8: return compare_typed<uint8_t>(report, what, c, want_at);
    case DType::Int32: return compare_typed<int32_t>(report, what, c, want_at);
    case DType::Int64: return compare_typed<int64_t>(report, what, c, want_at);
    case DType::Float16: return compare_typed<Half>(report, what, c, want_at);
    case DType::BFloat16: return compare_typed<BFloat16>(report, what, c, want_at);
    case DType::Float32: return compare_typed<float>(report, what, c, want_at);
    case DType::Float64: return compare_typed<double>(report, what, c, want_at);
  }
}

// An output whose every element differs from what the collective must write there: NaN,
// or 77 (no input or result is), or for bool the opposite of the result.
template <class F>
Tensor poisoned(int64_t n, DType dt, Device d, const F& want_at) {
  if (dt != kBool) return full({n}, is_floating(dt) ? std::nan("") : 77.0, TensorOptions(dt, d));
  std::vector<double> v(n);
  for (int64_t k = 0; k < n; ++k) v[k] = want_at(k).value == 0 ? 1 : 0;
  return tensor(v, {n}, TensorOptions(dt, d));
}

inline std::string describe(const char* collective, DType dt, int64_t n, const std::string& more = "") {
  return detail::str(collective, more, " of ", n, " ", dtype_name(dt));
}

inline bool bool_refuses(DType dt, ReduceOp op) {
  return dt == kBool && (op == ReduceOp::kSum || op == ReduceOp::kAvg);
}

// A bool sum or average must be refused at once with an ember::Error naming bool and op.
template <class Issue>
void check_refused(CheckReport& report, const std::string& what, ReduceOp op, const Issue& issue) {
  report.checked();
  try {
    issue();
    report.fail(what + " was accepted; bool tensors must refuse it");
  } catch (const Error& e) {
    const std::string m = e.what();
    if (m.find("bool") == std::string::npos || m.find(reduce_op_name(op)) == std::string::npos)
      report.fail(what + " was refused without naming bool and " + reduce_op_name(op) + ": " + m);
  }
}

inline void check_all_reduce(ProcessGroup& pg, Device d, DType dt, ReduceOp op, int64_t n, CheckReport& report) {
  const std::string what = describe("all_reduce", dt, n, std::string(" (") + reduce_op_name(op) + ")");
  Tensor t = input_tensor(pg.rank(), n, dt, d);
  if (bool_refuses(dt, op)) return check_refused(report, what, op, [&] { pg.all_reduce(t, op); });
  std::vector<Want> want(std::min(n, kPeriod));
  for (int64_t i = 0; i < static_cast<int64_t>(want.size()); ++i) want[i] = reduced(op, dt, pg.size(), i);
  pg.all_reduce(t, op)->wait();
  report.checked();
  compare(report, what, t, [&](int64_t k) { return want[k % kPeriod]; });
}

// Rank r's inputs over one period, as exact Wants: a table look-up is 4 times faster than
// the hash at 16 Mi elements.
inline std::vector<Want> input_table(int r, int64_t n, DType dt) {
  std::vector<Want> v(std::min(n, kPeriod));
  for (int64_t i = 0; i < static_cast<int64_t>(v.size()); ++i) v[i] = {input_value(r, i, dt), 0};
  return v;
}

inline void check_broadcast(ProcessGroup& pg, Device d, DType dt, int64_t n, int root, CheckReport& report) {
  Tensor t = input_tensor(pg.rank(), n, dt, d);  // the others' own values, which root's must replace
  const std::vector<Want> want = input_table(root, n, dt);
  pg.broadcast(t, root)->wait();
  report.checked();
  compare(report, describe("broadcast", dt, n, " from rank " + std::to_string(root)), t,
          [&](int64_t k) { return want[k % kPeriod]; });
}

// n elements from each rank.
inline void check_all_gather(ProcessGroup& pg, Device d, DType dt, int64_t n, CheckReport& report) {
  std::vector<std::vector<Want>> inputs;
  for (int r = 0; r < pg.size(); ++r) inputs.push_back(input_table(r, n, dt));
  const auto want = [&](int64_t k) { return inputs[k / n][k % n % kPeriod]; };
  Tensor out = poisoned(n * pg.size(), dt, d, want);
  pg.all_gather(out, input_tensor(pg.rank(), n, dt, d))->wait();
  report.checked();
  compare(report, describe("all_gather", dt, n), out, want);
}

// n elements to each rank.
inline void check_reduce_scatter(ProcessGroup& pg, Device d, DType dt, ReduceOp op, int64_t n,
                                 CheckReport& report) {
  const std::string what = describe("reduce_scatter", dt, n, std::string(" (") + reduce_op_name(op) + ")");
  Tensor in = input_tensor(pg.rank(), n * pg.size(), dt, d);
  if (bool_refuses(dt, op))
    return check_refused(report, what, op, [&] { pg.reduce_scatter(empty({n}, TensorOptions(dt, d)), in, op); });
  const int64_t offset = pg.rank() * n;
  const auto want = [&](int64_t k) { return reduced(op, dt, pg.size(), offset + k); };
  Tensor out = poisoned(n, dt, d, want);
  pg.reduce_scatter(out, in, op)->wait();
  report.checked();
  compare(report, what, out, want);
}

// The last rank comes late; no rank may leave the barrier before it has reached it.
inline void check_barrier(ProcessGroup& pg, CheckReport& report) {
  const std::string key = pg.next_key("barrier");
  if (pg.rank() == pg.size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  pg.store().set(key + "/" + std::to_string(pg.rank()), "here");
  pg.barrier()->wait();
  report.checked();
  std::vector<std::string> keys;
  for (int r = 0; r < pg.size(); ++r) keys.push_back(key + "/" + std::to_string(r));
  const std::vector<bool> arrived = pg.store().check(keys);
  for (int r = 0; r < pg.size(); ++r)
    if (!arrived[r]) report.fail(detail::str("barrier: left on rank ", pg.rank(), " before rank ", r, " arrived"));
}

// ----- sweeps: every dtype (and reduce op) at each size -----

inline void check_all_reduces(ProcessGroup& pg, Device d, const std::vector<int64_t>& sizes, CheckReport& report) {
  for (DType dt : kAllDTypes)
    for (ReduceOp op : kAllOps)
      for (int64_t n : sizes) check_all_reduce(pg, d, dt, op, n, report);
}

// The root turns with each case, so every rank is the root of some.
inline void check_broadcasts(ProcessGroup& pg, Device d, const std::vector<int64_t>& sizes, CheckReport& report) {
  int turn = 0;
  for (DType dt : kAllDTypes)
    for (int64_t n : sizes) check_broadcast(pg, d, dt, n, turn++ % pg.size(), report);
}

inline void check_all_gathers(ProcessGroup& pg, Device d, const std::vector<int64_t>& sizes, CheckReport& report) {
  for (DType dt : kAllDTypes)
    for (int64_t n : sizes) check_all_gather(pg, d, dt, n, report);
}

inline void check_reduce_scatters(ProcessGroup& pg, Device d, const std::vector<int64_t>& sizes,
                                  CheckReport& report) {
  for (DType dt : kAllDTypes)
    for (ReduceOp op : kAllOps)
      for (int64_t n : sizes) check_reduce_scatter(pg, d, dt, op, n, report);
}

inline void check_barriers(ProcessGroup& pg, CheckReport& report) {
  for (int k = 0; k < 3; ++k) check_barrier(pg, report);
}

inline void check_every_collective(ProcessGroup& pg, Device d, const std::vector<int64_t>& sizes,
                                   CheckReport& report) {
  check_all_reduces(pg, d, sizes, report);
  check_broadcasts(pg, d, sizes, report);
  check_all_gathers(pg, d, sizes, report);
  check_reduce_scatters(pg, d, sizes, report);
  check_barriers(pg, report);
}

// 16 Mi float32 elements: all_reduce with each op, a broadcast from the last rank, and an
// all_gather into 16 Mi elements (rounded down to a multiple of the ranks). No
// reduce_scatter: Gloo's is its all_reduce of a copy (comm/gloo_backend.cpp), so at this
// size it would add time, not a path.
inline void check_large(ProcessGroup& pg, Device d, CheckReport& report) {
  for (ReduceOp op : kAllOps) check_all_reduce(pg, d, kFloat32, op, kLarge, report);
  check_broadcast(pg, d, kFloat32, kLarge, pg.size() - 1, report);
  check_all_gather(pg, d, kFloat32, kLarge / pg.size(), report);
}

}  // namespace ember::comm::testing
