#include "core/autocast.h"

#include "base/error.h"

namespace ember {
namespace {
thread_local std::optional<DType> tls_autocast;
}  // namespace

AutocastScope::AutocastScope(DType dtype) : previous_(tls_autocast) {
  EMBER_CHECK(dtype == kBFloat16 || dtype == kFloat16, "AutocastScope: expected bfloat16 or float16, got ",
              dtype_name(dtype));
  tls_autocast = dtype;
}

AutocastScope::~AutocastScope() { tls_autocast = previous_; }

std::optional<DType> autocast_dtype() { return tls_autocast; }

}  // namespace ember
