#include "layers/activation.h"

#include "base/error.h"

namespace ember::nn {

Dropout::Dropout(double p) : p_(p) { EMBER_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p); }
std::string LeakyReLU::name() const { return "LeakyReLU(negative_slope=" + std::to_string(slope_) + ")"; }
std::string ELU::name() const { return "ELU(alpha=" + std::to_string(alpha_) + ")"; }
std::string Dropout::name() const { return "Dropout(p=" + std::to_string(p_) + ")"; }

Dropout2d::Dropout2d(double p) : p_(p) {
  EMBER_CHECK(p >= 0 && p <= 1, "Dropout2d: p must be in [0, 1], got ", p);
}
std::string Dropout2d::name() const { return detail::str("Dropout2d(p=", p_, ")"); }

}  // namespace ember::nn
