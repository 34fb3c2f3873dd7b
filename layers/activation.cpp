#include "layers/activation.h"

#include "base/error.h"

namespace ember::nn {

Dropout::Dropout(double p) : p_(p) { EMBER_CHECK(p >= 0 && p <= 1, "Dropout: p must be in [0, 1], got ", p); }
std::string Dropout::name() const { return "Dropout(p=" + std::to_string(p_) + ")"; }

}  // namespace ember::nn
