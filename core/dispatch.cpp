#include "core/dispatch.h"

#include "base/error.h"

namespace ember::kernels {

std::atomic<bool> g_profiling{false};

void OpStubBase::missing(DeviceType d) const {
  EMBER_CHECK(d != DeviceType::Meta, name_, ": the meta device has no kernels (its ops only check and allocate)");
  EMBER_FAIL(name_, ": no kernel is registered for device type ", device_type_name(d));
}

#define EMBER_DEFINE_UNARY(name) OpStub<UnaryFn> name##_stub{#name};
#define EMBER_DEFINE_BINARY(name) OpStub<BinaryFn> name##_stub{#name};
#define EMBER_DEFINE_OTHER(name, Fn) OpStub<Fn> name##_stub{#name};
std::string index_check_message(IndexCheck kind, int64_t value, int64_t position, int64_t size) {
  switch (kind) {
    case IndexCheck::kCrossEntropyTarget:
      return detail::str("cross_entropy: target ", value, " at position ", position, " is out of range for ", size,
                         " classes");
    case IndexCheck::kEmbeddingIndex:
      return detail::str("embedding: index ", value, " at position ", position, " is out of range for ", size, " rows");
    case IndexCheck::kEmbeddingBackwardIndex:
      return detail::str("embedding_backward: index ", value, " at position ", position, " is out of range for ",
                         size, " rows");
  }
  return "index out of range";
}

EMBER_UNARY_OPS(EMBER_DEFINE_UNARY)
EMBER_BINARY_OPS(EMBER_DEFINE_BINARY)
EMBER_OTHER_OPS(EMBER_DEFINE_OTHER)

const std::vector<const OpStubBase*>& all_stubs() {
#define EMBER_LIST_ONE(name) &name##_stub,
#define EMBER_LIST_OTHER(name, Fn) &name##_stub,
  static const std::vector<const OpStubBase*> stubs = {
      EMBER_UNARY_OPS(EMBER_LIST_ONE) EMBER_BINARY_OPS(EMBER_LIST_ONE) EMBER_OTHER_OPS(EMBER_LIST_OTHER)};
  return stubs;
}

}  // namespace ember::kernels
