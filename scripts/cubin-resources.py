#!/usr/bin/python3
"""Per-kernel resources of an nvcc build's sm_90 cubins, as `cuobjdump --dump-resource-usage`
gives them (this machine has no cuobjdump): registers, static shared memory, stack frame.

    scripts/cubin-resources.py BUILD_DIR [--arch sm_90] > bench/calibration/sm90_resources.tsv

Reads the .nv_fatbin section of BUILD_DIR's object files (the fatbin's cubin entries are
stored uncompressed; its PTX entries are compressed and skipped). In a cubin, the .nv.info
section holds attributes per function symbol: EIATTR_REGCOUNT (0x2f) the registers,
EIATTR_MAX_STACK_SIZE (0x23) the stack frame; .nv.shared.<kernel> is the kernel's static
shared memory (its size); a kernel is a function with a .nv.info.<kernel> section. The emulator finds a launch's
row by the kernel's mangled name, which GCC and nvcc spell alike (Itanium ABI, the same
toolkit types).
"""
import argparse
import os
import struct
import sys

EIATTR_REGCOUNT = 0x2F
EIATTR_MAX_STACK_SIZE = 0x23
EIFMT_SVAL = 0x04


def sections(elf):
    shoff = struct.unpack_from('<Q', elf, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', elf, 0x3A)
    heads = [struct.unpack_from('<IIQQQQIIQQ', elf, shoff + i * shentsize) for i in range(shnum)]
    names = heads[shstrndx][4]

    def name(off):
        return elf[names + off:elf.index(b'\0', names + off)].decode()

    return [(name(h[0]), h) for h in heads]


def fatbin_cubins(obj, arch):
    """The cubins of `arch` (e.g. 90) in the object file's .nv_fatbin section."""
    for name, h in sections(obj):
        if name != '.nv_fatbin':
            continue
        data = obj[h[4]:h[4] + h[5]]
        off = 0
        while off + 16 <= len(data):
            magic, _, header, size = struct.unpack_from('<IHHQ', data, off)
            if magic != 0xBA55ED50:
                break
            entry, end = off + header, off + header + size
            while entry < end:
                kind, _, ehs, psz = struct.unpack_from('<HHIQ', data, entry)
                sm = struct.unpack_from('<I', data, entry + 28)[0]
                payload = data[entry + ehs:entry + ehs + psz]
                if kind == 2 and sm == arch and payload[:4] == b'\x7fELF':
                    yield payload
                entry += ehs + psz
            off = end


def symbol_attributes(info):
    """{attribute: {symbol index: value}} of the section's EIFMT_SVAL (symbol, u32) entries."""
    out = {}
    off = 0
    while off + 4 <= len(info):
        fmt, attr, size = info[off], info[off + 1], struct.unpack_from('<H', info, off + 2)[0]
        if fmt == EIFMT_SVAL:
            if size == 8:
                sym, value = struct.unpack_from('<II', info, off + 4)
                out.setdefault(attr, {})[sym] = value
            off += 4 + size
        else:
            off += 4
    return out


def kernels(cubin):
    secs = sections(cubin)
    by_name = {n: h for n, h in secs}
    symtab, strtab = by_name['.symtab'], by_name['.strtab']
    symbols = []
    for off in range(symtab[4], symtab[4] + symtab[5], 24):
        st_name = struct.unpack_from('<I', cubin, off)[0]
        symbols.append(cubin[strtab[4] + st_name:cubin.index(b'\0', strtab[4] + st_name)].decode())
    info = by_name['.nv.info']
    attrs = symbol_attributes(cubin[info[4]:info[4] + info[5]])
    regs = {symbols[i]: v for i, v in attrs.get(EIATTR_REGCOUNT, {}).items()}
    stack = {symbols[i]: v for i, v in attrs.get(EIATTR_MAX_STACK_SIZE, {}).items()}
    for n, h in secs:
        if n.startswith('.nv.info.'):
            k = n[len('.nv.info.'):]
            yield k, regs.get(k, 0), by_name.get('.nv.shared.' + k, (0,) * 10)[5], stack.get(k, 0)


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('build', help='an nvcc build directory (its object files hold the cubins)')
    p.add_argument('--arch', default='sm_90')
    a = p.parse_args()
    arch = int(a.arch.split('_')[1].rstrip('a'))
    rows = {}
    for root, _, files in os.walk(a.build):
        for f in sorted(files):
            if not f.endswith('.cu.o'):
                continue
            with open(os.path.join(root, f), 'rb') as fh:
                obj = fh.read()
            for cubin in fatbin_cubins(obj, arch):
                for k, regs, smem, stack in kernels(cubin):
                    rows[k] = (regs, smem, stack)
    if not rows:
        sys.exit(f'no {a.arch} cubins in {a.build}')
    print(f'# kernel resources of the {a.arch} cubins of an nvcc build: scripts/cubin-resources.py BUILD > this file')
    print('# mangled name\tregisters\tstatic shared bytes\tstack bytes')
    for k in sorted(rows):
        regs, smem, stack = rows[k]
        print(f'{k}\t{regs}\t{smem}\t{stack}')


if __name__ == '__main__':
    main()
