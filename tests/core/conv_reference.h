// The direct float64 convolution that conv2d's tests compare with, and the output size
// rule shared with the pooling tests.
#pragma once

#include <cmath>
#include <utility>
#include <vector>

#include "reference.h"

namespace ember::test {

using Pair = std::pair<int64_t, int64_t>;

inline int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode = false) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;  // the last window must start inside the input or left padding
  return o;
}

struct ConvCase {
  int64_t n, c, h, w, o, kh, kw;
  Pair stride, padding, dilation;
  int64_t groups;
  bool bias;
};

// Direct loops; also returns S = sum |x w| + |b| per output, the rounding error scale.
inline std::vector<double> ref_conv(const ConvCase& p, const Tensor& x, const Tensor& wt, const Tensor& b, Shape* shape,
                             std::vector<double>* scale) {
  const int64_t oh = out_size(p.h, p.kh, p.stride.first, p.padding.first, p.dilation.first);
  const int64_t ow = out_size(p.w, p.kw, p.stride.second, p.padding.second, p.dilation.second);
  const int64_t cg = p.c / p.groups, og = p.o / p.groups;
  *shape = {p.n, p.o, oh, ow};
  std::vector<double> vx = values(x), vw = values(wt), vb = p.bias ? values(b) : std::vector<double>(p.o, 0.0);
  std::vector<double> out(shape_numel(*shape));
  scale->assign(out.size(), 0.0);
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t o = 0; o < p.o; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t z = 0; z < ow; ++z) {
          double acc = vb[o], s = std::fabs(vb[o]);
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < p.kh; ++i)
              for (int64_t j = 0; j < p.kw; ++j) {
                const int64_t hy = y * p.stride.first - p.padding.first + i * p.dilation.first;
                const int64_t wz = z * p.stride.second - p.padding.second + j * p.dilation.second;
                if (hy < 0 || hy >= p.h || wz < 0 || wz >= p.w) continue;  // zero padding
                const int64_t c = (o / og) * cg + ci;                      // o's group, then its channel
                const double t = vx[((n * p.c + c) * p.h + hy) * p.w + wz] * vw[((o * cg + ci) * p.kh + i) * p.kw + j];
                acc += t;
                s += std::fabs(t);
              }
          const int64_t k = ((n * p.o + o) * oh + y) * ow + z;
          out[k] = acc;
          (*scale)[k] = s;
        }
  return out;
}

}  // namespace ember::test
