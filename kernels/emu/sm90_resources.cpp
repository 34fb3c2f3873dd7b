// The sm_90 resources table and occupancy (kernels/emu/sm90_resources.h).
#include "kernels/emu/sm90_resources.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#ifndef EMBER_EMU_RESOURCES_FILE
#define EMBER_EMU_RESOURCES_FILE ""
#endif

namespace ember::emu {

Occupancy sm90_occupancy(const KernelResources& r, unsigned threads, size_t dynamic_shared) {
  constexpr int kRegisters = 65536, kRegisterUnit = 256, kWarps = 64, kBlocks = 32;
  constexpr size_t kShared = 228 * 1024, kReservedPerBlock = 1024;
  const int warps = static_cast<int>((threads + 31) / 32);
  Occupancy o;
  o.blocks_per_sm = std::min(kBlocks, kWarps / std::max(warps, 1));
  o.limiter = o.blocks_per_sm == kBlocks ? "blocks" : "warps";
  if (r.known && r.registers > 0) {
    const int per_warp = (r.registers * 32 + kRegisterUnit - 1) / kRegisterUnit * kRegisterUnit;
    const int by_registers = kRegisters / per_warp / warps;
    if (by_registers < o.blocks_per_sm) o.blocks_per_sm = by_registers, o.limiter = "registers";
  }
  const size_t shared = (r.known ? r.static_shared : 0) + dynamic_shared + kReservedPerBlock;
  const int by_shared = static_cast<int>(kShared / shared);
  if (by_shared < o.blocks_per_sm) o.blocks_per_sm = by_shared, o.limiter = "shared memory";
  o.warps_per_sm = o.blocks_per_sm * warps;
  return o;
}

namespace detail {
namespace {

// The symbols of one loaded module (nm, once), by offset from its load address.
const std::map<uintptr_t, std::string>& module_symbols(const std::string& file) {
  static std::map<std::string, std::map<uintptr_t, std::string>> modules;
  auto [it, fresh] = modules.try_emplace(file);
  if (!fresh) return it->second;
  const std::string command = "nm --defined-only '" + file + "' 2>/dev/null";
  if (FILE* p = popen(command.c_str(), "r")) {
    char line[8192];
    while (std::fgets(line, sizeof line, p)) {
      char* end = nullptr;
      const uintptr_t value = std::strtoull(line, &end, 16);
      if (end == line || std::strlen(end) < 4) continue;
      std::string name(end + 3);
      while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
      if (name.rfind("_Z", 0) == 0) it->second.emplace(value, std::move(name));
    }
    pclose(p);
  }
  return it->second;
}

}  // namespace

// The kernel function's mangled name: from the dynamic symbols when exported, else from
// the module's symbol table (a program's kernels are not exported).
std::string mangled_name(const void* fn) {
  static std::mutex mu;
  std::lock_guard lock(mu);
  Dl_info info{};
  if (dladdr(fn, &info) == 0) return "";
  if (info.dli_sname != nullptr && info.dli_saddr == fn) return info.dli_sname;
  const auto* ehdr = static_cast<const ElfW(Ehdr)*>(info.dli_fbase);
  const uintptr_t offset =
      reinterpret_cast<uintptr_t>(fn) - (ehdr->e_type == ET_DYN ? reinterpret_cast<uintptr_t>(info.dli_fbase) : 0);
  // The main program's dli_fname is its argv[0], which may not name a path.
  for (const char* file : {info.dli_fname, "/proc/self/exe"}) {
    if (file == nullptr || *file == '\0') continue;
    const auto& symbols = module_symbols(file);
    if (auto s = symbols.find(offset); s != symbols.end()) return s->second;
  }
  return "";
}

namespace {

std::map<std::string, KernelResources> load_resources() {
  std::map<std::string, KernelResources> table;
  const char* env = std::getenv("EMBER_EMU_RESOURCES");
  std::ifstream in(env != nullptr ? env : EMBER_EMU_RESOURCES_FILE);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name;
    KernelResources r;
    if (std::getline(fields, name, '\t') && fields >> r.registers >> r.static_shared >> r.stack) {
      r.known = true;
      table.emplace(std::move(name), r);
    }
  }
  return table;
}

}  // namespace

KernelResources resources_of(const std::string& symbol) {
  static const std::map<std::string, KernelResources> table = load_resources();
  auto it = table.find(symbol);
  return it == table.end() ? KernelResources{} : it->second;
}

}  // namespace detail
}  // namespace ember::emu
