#include "core/meta.h"

#include <atomic>

#include "base/error.h"

namespace ember {
namespace {
std::atomic<MetaListener*> g_listener{nullptr};
thread_local const void* t_scope = nullptr;
std::atomic<DeviceType> g_meta_target{DeviceType::CPU};
}  // namespace

MemoryScope::MemoryScope(const void* tag) : saved_(t_scope) {
  t_scope = tag;
  if (MetaListener* l = g_listener.load(std::memory_order_relaxed)) [[unlikely]]
    l->entered(tag);
}

MemoryScope::~MemoryScope() {
  if (MetaListener* l = g_listener.load(std::memory_order_relaxed)) [[unlikely]]
    l->left(t_scope);
  t_scope = saved_;
}

const void* current_memory_scope() { return t_scope; }

DeviceType meta_target() { return g_meta_target.load(std::memory_order_relaxed); }

void set_meta_target(DeviceType type) {
  EMBER_CHECK(type != DeviceType::Meta, "set_meta_target: meta tensors stand for the CPU or CUDA, not for meta");
  g_meta_target.store(type, std::memory_order_relaxed);
}

MetaListenerScope::MetaListenerScope(MetaListener& listener) {
  MetaListener* none = nullptr;
  EMBER_CHECK(g_listener.compare_exchange_strong(none, &listener),
              "MetaListenerScope: another meta listener (memory estimate) is running");
}

MetaListenerScope::~MetaListenerScope() { g_listener.store(nullptr); }

namespace detail {
MetaListener* meta_listener() { return g_listener.load(std::memory_order_relaxed); }

void check_has_data(bool has_data, const char* op) {
  EMBER_CHECK(has_data, op, ": the tensor has no data: it is on the meta device");
}
}  // namespace detail

}  // namespace ember
