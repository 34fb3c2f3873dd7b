// CRC-32C (Castagnoli), the checksum that ember's safetensors files carry for each tensor
// (core/safetensors.h). It is computed with SSE4.2's crc32 instruction where the CPU has
// it (every x86-64 machine since 2008; 8 bytes per instruction), else with tables (about
// 1 byte per cycle less fast); both give the same values. Chosen over zlib's CRC-32 for that
// instruction: Note [Checksum cost] in safetensors.cpp has the figures.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ember {

// The CRC-32C of n bytes, continuing from `crc` (the value of the bytes before them; 0 to
// start). crc32c("123456789", 9) == 0xE3069283.
uint32_t crc32c(const void* data, std::size_t n, uint32_t crc = 0);

namespace detail {
uint32_t crc32c_tables(const void* data, std::size_t n, uint32_t crc);  // any CPU
bool crc32c_has_instruction();  // this CPU has SSE4.2
}  // namespace detail

}  // namespace ember
