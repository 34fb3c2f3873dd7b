// Tensor::str(): PyTorch's layout, e.g.
//   tensor([[ 1.0000, -2.5000],
//           [ 3.0000,  4.0000]], dtype=float64)
// Floats print with 4 decimals, or in scientific notation when magnitudes span too much;
// tensors over 1000 elements show the first and last 3 entries of each dim.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "base/error.h"
#include "core/cuda_graph.h"
#include "core/stream.h"
#include "core/tensor.h"

namespace ember {
namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Format {
  bool floating;
  bool scientific;
  int width;
};

std::string format_value(double v, const Format& f) {
  char buf[64];
  if (!f.floating) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else if (std::isnan(v)) {
    std::snprintf(buf, sizeof buf, "nan");
  } else if (std::isinf(v)) {
    std::snprintf(buf, sizeof buf, v > 0 ? "inf" : "-inf");
  } else {
    std::snprintf(buf, sizeof buf, f.scientific ? "%.4e" : "%.4f", v);
  }
  return buf;
}

void print_dim(std::string& out, const Tensor& t, const std::vector<double>& vals, int64_t& pos, int64_t d,
               bool summarize, const Format& f, int indent) {
  // Walks the row-major `vals` of t; `pos` is the flat index of the current block.
  const Shape& shape = t.shape();
  int64_t n = shape[d];
  int64_t block = 1;
  for (size_t i = d + 1; i < shape.size(); ++i) block *= shape[i];
  out += '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      out += d + 1 == t.dim() ? "..., " : "...,\n" + std::string(indent + d + 1, ' ');
      i = n - kEdgeItems;
    }
    int64_t start = pos + i * block;
    if (d + 1 == t.dim()) {
      std::string s = format_value(vals[start], f);
      out += std::string(std::max<int>(0, f.width - static_cast<int>(s.size())), ' ') + s;
    } else {
      int64_t p = start;
      print_dim(out, t, vals, p, d + 1, summarize, f, indent);
    }
    if (i + 1 < n) {
      if (d + 1 == t.dim()) {
        out += ", ";
      } else {
        out += ',';
        out += std::string(t.dim() - d - 1, '\n');
        out += std::string(indent + d + 1, ' ');
      }
    }
  }
  out += ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  if (device().is_meta())  // no values to show (PyTorch prints the same)
    return detail::str("tensor(..., size=", shape_str(shape()),
                       dtype() != kFloat32 ? detail::str(", dtype=", dtype_name(dtype())) : std::string(),
                       ", device='meta')");
  detail::check_not_capturing(Stream::current(device()), "printing a tensor");
  std::vector<double> vals = to_vector<double>();
  Format f{is_floating(dtype()), false, 0};
  double lo = INFINITY, hi = 0;
  for (double v : vals)
    if (std::isfinite(v) && v != 0) {
      lo = std::min(lo, std::fabs(v));
      hi = std::max(hi, std::fabs(v));
    }
  f.scientific = f.floating && hi > 0 && (hi >= 1e8 || lo < 1e-4 || hi / lo > 1e7);
  for (double v : vals) f.width = std::max<int>(f.width, static_cast<int>(format_value(v, f).size()));

  std::string out = "tensor(";
  if (dim() == 0) {
    out += format_value(vals[0], f);
  } else {
    int64_t pos = 0;
    print_dim(out, *this, vals, pos, 0, numel() > kSummarizeAbove, f, 7);
  }
  if (numel() == 0) out += detail::str(", size=", shape_str(shape()));
  if (dtype() != kFloat32 && dtype() != kInt64) out += detail::str(", dtype=", dtype_name(dtype()));
  if (!device().is_cpu()) out += ", device='" + device().str() + "'";
  return out + ")";
}

}  // namespace ember
