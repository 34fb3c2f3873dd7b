// The profile's integer-divide counts (kernels/emu/division_sites.cpp, Note [Divisions]): the
// objdump listing's reading, on listings written here, and the counts of kernels with a
// known number of divides, in this translation unit, built with
// -fsanitize-coverage=trace-pc as the kernel bench is (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/launch.h"
#include "kernels/emu/division_sites.h"
#include "kernels/emu/profile.h"

namespace ember::kernels::cuda {
namespace {

std::vector<emu::DivisionSite> sites_of(const std::string& listing, uintptr_t bias = 0) {
  FILE* f = fmemopen(const_cast<char*>(listing.data()), listing.size(), "r");
  EXPECT_NE(f, nullptr);
  auto sites = emu::division_sites_from_objdump(f, bias);
  std::fclose(f);
  return sites;
}

TEST(EmuDivisionSites, ABlockRunsFromATracePcCallToTheNext) {
  const auto sites = sites_of(
      "0000000000047d90 <kernel>:\n"
      "   47d90:\tpush   %rbp\n"
      "   47d91:\tidiv   %rcx\n"  // before any block: not counted
      "   47d94:\tcall   2e140 <__sanitizer_cov_trace_pc@plt>\n"
      "   47d99:\tmov    %rdx,%r15\n"
      "   47d9c:\tidivq  0x88(%rsp)\n"
      "   47da4:\tidiv   %r8\n"
      "   47da7:\tdiv    %r8d\n"
      "   47daa:\tdivl   0x5c(%rsp)\n"
      "   47dae:\tdivss  %xmm1,%xmm0\n"  // a float divide: not an integer one
      "   47db2:\tcall   2e140 <__sanitizer_cov_trace_pc@plt>\n"
      "   47db7:\tadd    %rax,%rbx\n"  // a block without divides: no site
      "   47dba:\tcall   2e140 <__sanitizer_cov_trace_pc@plt>\n"
      "   47dbf:\tdiv    %ecx\n"
      "   47dc1:\tjmp    47e00 <kernel+0x70>\n"
      "   47dc6:\tidiv   %rsi\n"  // past the jump: another block, which has no call
      "   47dc9:\tcall   2e140 <__sanitizer_cov_trace_pc@plt>\n"
      "   47dce:\tidiv   %rdi\n"
      "   47dd1:\tret\n"
      "   47dd2:\tidiv   %rdi\n",
      0x1000);
  ASSERT_EQ(sites.size(), 3u);
  EXPECT_EQ(sites[0].pc, 0x47d99u + 0x1000);  // the return address of the call, moved by the bias
  EXPECT_EQ(sites[0].div64, 2u);              // idivq, %r8
  EXPECT_EQ(sites[0].div32, 2u);              // %r8d, divl
  EXPECT_EQ(sites[1].pc, 0x47dbfu + 0x1000);
  EXPECT_EQ(sites[1].div64, 0u);
  EXPECT_EQ(sites[1].div32, 1u);
  EXPECT_EQ(sites[2].pc, 0x47dceu + 0x1000);
  EXPECT_EQ(sites[2].div64, 1u);
  EXPECT_EQ(sites[2].div32, 0u);
}

TEST(EmuDivisionSites, ListingsWithoutBlocksOrInstructionsGiveNone) {
  EXPECT_TRUE(sites_of("").empty());
  EXPECT_TRUE(sites_of("a.out:     file format elf64-x86-64\n\nDisassembly of section .text:\n").empty());
  EXPECT_TRUE(sites_of("   47d91:\tidiv   %rcx\n   47d94:\tidiv   %ecx\n").empty());
  // A line longer than the reader's buffer is read in pieces, none taken for an instruction.
  EXPECT_TRUE(sites_of("   47d94:\tcall   2e140 <__sanitizer_cov_trace_pc@plt>\n   47d99:\tmov " +
                       std::string(10000, 'x') + "\n")
                  .empty());
}

TEST(EmuDivisionSites, MoreSitesThanTheTableHoldsAreRefused) {
  std::vector<emu::DivisionSite> many(100000);
  for (size_t i = 0; i < many.size(); ++i) many[i] = {0x1000 + 16 * i, 1, 0};
  EXPECT_THROW(emu::set_profile_division_sites(many), Error);
  EXPECT_THROW(emu::set_profile_division_sites({{0, 1, 0}}), Error);
  emu::set_profile_division_sites({});
}

// Each thread divides its value n times by a 64-bit divisor and once by a 32-bit one, both
// read from memory so the compiler cannot turn them into multiplies; a divide by a
// constant (by 7) becomes a multiply on both the host and the GPU, and is not counted.
__global__ void divide(const int64_t* values, const int64_t* divisors, int64_t* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  int64_t v = values[i];
  for (int k = 0; k < n; ++k) v = v / divisors[0] + k;
  out[i] = v + int32_t(values[i]) / int32_t(divisors[1]) + values[i] / 7;
}

emu::LaunchProfile profile_of_divide(const int64_t* values, const int64_t* divisors, int64_t* out, int n) {
  emu::set_profile("all", false);
  launch<divide>(LaunchConfig{dim3(3), dim3(64), 0}, nullptr, values, divisors, out, n);
  auto profiles = emu::take_profiles();
  emu::set_profile("", false);
  EXPECT_EQ(profiles.size(), 1u);
  return profiles.empty() ? emu::LaunchProfile{} : profiles[0];
}

TEST(EmuDivisionSites, ACountIsADivideAThreadRan) {
  std::string why;
  const std::vector<emu::DivisionSite> sites = emu::division_sites_of_this_program(why);
  ASSERT_TRUE(why.empty()) << why;
  ASSERT_FALSE(sites.empty()) << "no divides found in this program's trace-pc blocks";
  std::vector<int64_t> values(192), out(192, 0);
  for (size_t i = 0; i < values.size(); ++i) values[i] = int64_t(i) * 1000003 + 17;
  const int64_t divisors[] = {3, 5};
  emu::set_profile_division_sites(sites);
  for (int n : {0, 1, 5}) {
    const emu::LaunchProfile p = profile_of_divide(values.data(), divisors, out.data(), n);
    EXPECT_EQ(p.divisions_64, 192u * n) << "n " << n;
    EXPECT_EQ(p.divisions_32, 192u) << "n " << n;
    int64_t want = values[191];
    for (int k = 0; k < n; ++k) want = want / 3 + k;
    EXPECT_EQ(out[191], want + int32_t(values[191]) / 5 + values[191] / 7);
  }
  // Without the sites the same launch counts none.
  emu::set_profile_division_sites({});
  const emu::LaunchProfile p = profile_of_divide(values.data(), divisors, out.data(), 5);
  EXPECT_EQ(p.divisions_64, 0u);
  EXPECT_EQ(p.divisions_32, 0u);
}

}  // namespace
}  // namespace ember::kernels::cuda
