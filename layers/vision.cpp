#include "layers/vision.h"

#include "base/error.h"

namespace ember::nn {
namespace {

std::string pair_str(std::pair<int64_t, int64_t> p) { return detail::str("(", p.first, ", ", p.second, ")"); }

}  // namespace

PixelShuffle::PixelShuffle(int64_t r) : r_(r) {
  EMBER_CHECK(r > 0, "PixelShuffle: upscale_factor must be positive, got ", r);
}
std::string PixelShuffle::name() const { return detail::str("PixelShuffle(upscale_factor=", r_, ")"); }

PixelUnshuffle::PixelUnshuffle(int64_t r) : r_(r) {
  EMBER_CHECK(r > 0, "PixelUnshuffle: downscale_factor must be positive, got ", r);
}
std::string PixelUnshuffle::name() const { return detail::str("PixelUnshuffle(downscale_factor=", r_, ")"); }

Upsample::Upsample(InterpolateOptions o) : options_(o) {
  EMBER_CHECK(o.size.has_value() != o.scale_factor.has_value(), "Upsample: give exactly one of size and scale_factor");
}
std::string Upsample::name() const {
  const char* mode = options_.mode == InterpolateMode::kBilinear ? "bilinear" : "nearest";
  if (options_.size) return detail::str("Upsample(size=", pair_str(*options_.size), ", mode='", mode, "')");
  return detail::str("Upsample(scale_factor=(", options_.scale_factor->first, ", ", options_.scale_factor->second,
                     "), mode='", mode, "')");
}

}  // namespace ember::nn
