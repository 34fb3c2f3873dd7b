// Where a program's integer divides are, for the profile's division counts
// (kernels/emu/division_sites.cpp, Note [Divisions]): read from `objdump -d` of code built with
// -fsanitize-coverage=trace-pc, as the kernel bench is.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/emu/profile.h"

namespace ember::emu {

// The basic blocks of an `objdump -d --no-show-raw-insn` listing that hold `div`/`idiv`
// instructions, keyed as the trace-pc hook sees them: the address after a call of
// __sanitizer_cov_trace_pc, plus `load_bias`. A block runs from there to the next such
// call, or to an unconditional jump or a return (past them is another block, with its own
// call). A divide by a 64-bit register (%rcx, %r8) or a q-suffixed memory operand is
// 64-bit; any other (%ecx, %r8d, divl) is narrower. Divides outside a block are not counted.
std::vector<DivisionSite> division_sites_from_objdump(FILE* listing, uintptr_t load_bias);

// The same for the running program: objdump of its own file, moved by its load address.
// Empty, and `why` says why, when objdump cannot be run or prints nothing.
std::vector<DivisionSite> division_sites_of_this_program(std::string& why);

namespace detail {
// The site whose block starts at `pc` (the trace-pc hook's return address), or null: the
// profile's hook asks this at every basic block of a profiled launch.
const DivisionSite* division_site(uintptr_t pc);
}  // namespace detail

}  // namespace ember::emu
