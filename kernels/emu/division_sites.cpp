#include "kernels/emu/division_sites.h"

#include <link.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string_view>

#include "base/error.h"

namespace ember::emu {

// Note [Divisions]: a 64-bit integer divide by a divisor only known at run time is one
// instruction on the host and a called routine of tens of instructions in nvcc's SASS (a
// 32-bit one an inline sequence of about twenty), so the index arithmetic of a kernel that
// divides per element costs the GPU far more than its basic blocks show. The sites say
// which blocks hold divides (the kernel bench finds them in its own code with objdump,
// below); profile.cpp's trace-pc hook adds a block's divides each time a thread enters it.
// The sites are kept in an open-addressing table keyed by the return address, written
// only by set_profile_division_sites before the launches it should count, so the hook
// reads it without a lock.
namespace {

struct DivisionTable {
  static constexpr int kBits = 12;
  static constexpr size_t kSlots = size_t(1) << kBits;  // well above the sites a program has
  std::vector<DivisionSite> slots;                       // empty: no sites; pc 0: a free slot

  static size_t hash(uintptr_t pc) { return (pc * 0x9E3779B97F4A7C15ull) >> (64 - kBits); }
  DivisionSite* slot(uintptr_t pc) {
    size_t i = hash(pc);
    while (slots[i].pc != 0 && slots[i].pc != pc) i = (i + 1) & (kSlots - 1);
    return &slots[i];
  }
};
DivisionTable division_table;

bool is_64bit_register(std::string_view r) {  // %rcx, %r8, %r14; not %ecx, %r8d, %r8w, %r8b
  return r.starts_with("%r") && r.size() >= 3 && r.back() != 'd' && r.back() != 'w' && r.back() != 'b';
}

}  // namespace

namespace detail {

const DivisionSite* division_site(uintptr_t pc) {
  if (division_table.slots.empty()) return nullptr;
  const DivisionSite* s = division_table.slot(pc);
  return s->pc == pc ? s : nullptr;
}

}  // namespace detail

void set_profile_division_sites(const std::vector<DivisionSite>& sites) {
  EMBER_CHECK(sites.size() <= DivisionTable::kSlots / 2, "CUDA emulator: ", sites.size(),
              " division sites, more than the table's ", DivisionTable::kSlots / 2);
  DivisionTable t;
  if (!sites.empty()) t.slots.resize(DivisionTable::kSlots);
  for (const DivisionSite& site : sites) {
    EMBER_CHECK(site.pc != 0, "CUDA emulator: a division site at address 0");
    *t.slot(site.pc) = site;
  }
  division_table = std::move(t);
}

std::vector<DivisionSite> division_sites_from_objdump(FILE* listing, uintptr_t load_bias) {
  std::vector<DivisionSite> sites;
  DivisionSite open;  // the block being read
  bool in_block = false;
  auto end_block = [&] {
    if (in_block && (open.div64 || open.div32)) sites.push_back(open);
    in_block = false;
  };
  // "  2e703:\tcall   2e140 <__sanitizer_cov_trace_pc@plt>", "  48498:\tidivq  0x88(%rsp)"
  char buf[4096];
  while (std::fgets(buf, sizeof buf, listing)) {
    char* end = nullptr;
    const unsigned long long address = std::strtoull(buf, &end, 16);
    if (end == buf || end[0] != ':' || end[1] != '\t') continue;  // a heading, a blank line
    const std::string_view rest(end + 2);
    const size_t op_end = rest.find_first_of(" \t\n");
    const std::string_view op = rest.substr(0, op_end);
    std::string_view arg = op_end == rest.npos ? std::string_view() : rest.substr(op_end);
    arg.remove_prefix(std::min(arg.size(), arg.find_first_not_of(' ')));
    arg = arg.substr(0, arg.find_first_of(" \t\n"));
    if (op == "call" && rest.find("<__sanitizer_cov_trace_pc") != rest.npos) {
      end_block();
      in_block = true;  // from the next instruction: the call's return address
      open = {};
      continue;
    }
    if (in_block && open.pc == 0) open.pc = address + load_bias;
    const std::string_view base = op.starts_with('i') ? op.substr(1) : op;
    if (base == "div" || base == "divq" || base == "divl" || base == "divw" || base == "divb") {
      if (in_block) ++(base == "divq" || (base == "div" && is_64bit_register(arg)) ? open.div64 : open.div32);
    } else if (op.starts_with("ret") || op.starts_with("jmp") || (op == "notrack" && arg.starts_with("jmp"))) {
      end_block();
    }
  }
  end_block();
  return sites;
}

std::vector<DivisionSite> division_sites_of_this_program(std::string& why) {
  // The file's path, not /proc/self/exe: in the shell popen starts, that names the shell.
  std::error_code error;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", error).string();
  if (error || self.find('\'') != std::string::npos) {
    why = "cannot name this program's file";
    return {};
  }
  const std::string command = "objdump -d --no-show-raw-insn '" + self + "' 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) {
    why = "cannot run objdump";
    return {};
  }
  uintptr_t bias = 0;  // the executable's load address: the first object dl_iterate_phdr reports
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        *static_cast<uintptr_t*>(out) = info->dlpi_addr;
        return 1;
      },
      &bias);
  std::vector<DivisionSite> sites = division_sites_from_objdump(pipe.get(), bias);
  if (pclose(pipe.release()) != 0) why = "objdump failed (is binutils installed?)";
  return sites;
}

}  // namespace ember::emu
