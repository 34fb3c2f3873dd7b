#include "kernels/emu/memory_ranges.h"

#include <elf.h>
#include <link.h>

namespace ember::emu::detail {

std::vector<Range> shared_tls_ranges() {
  struct Search {
    uintptr_t self;
    bool first = true;
    std::vector<Range> ranges;
  } search{reinterpret_cast<uintptr_t>(&shared_tls_ranges), true, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        const bool program = s->first;
        s->first = false;
        bool holds_self = false;
        const ElfW(Phdr)* tls = nullptr;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_TLS) tls = &ph;
          if (ph.p_type == PT_LOAD && Range{info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz}.holds(s->self))
            holds_self = true;
        }
        if ((program || holds_self) && tls != nullptr && info->dlpi_tls_data != nullptr) {
          const auto lo = reinterpret_cast<uintptr_t>(info->dlpi_tls_data);
          s->ranges.push_back(Range{lo, lo + tls->p_memsz});
        }
        return 0;
      },
      &search);
  return search.ranges;
}

}  // namespace ember::emu::detail
