"""Lists the CUDA machine code (SASS) and PTX archs embedded in an ELF shared
object, by reading its .nv_fatbin section (works on compressed fatbins and
without cuobjdump, which system CUDA 13 here and the PyPI toolchain lack)."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2


def _section(data: bytes, wanted: str) -> bytes | None:
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    for h in headers:
        start = names_at + h[0]
        if data[start : data.index(b"\0", start)].decode() == wanted:
            return data[h[4] : h[4] + h[5]]
    return None


def archs(path: Path) -> tuple[list[str], list[str]]:
    """(sass, ptx) as sorted "X.Y" strings."""
    blob = _section(path.read_bytes(), ".nv_fatbin")
    sass: set[int] = set()
    ptx: set[int] = set()
    if blob is None:
        return [], []
    pos = 0
    while pos + 16 <= len(blob):
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", blob, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # fatbins are 8-byte aligned inside the section
            continue
        entry, end = pos + header_size, pos + header_size + fat_size
        while entry < end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", blob, entry)
            arch = struct.unpack_from("<I", blob, entry + 28)[0]
            (ptx if kind == KIND_PTX else sass).add(arch)
            entry += entry_header + payload
        pos = end

    def fmt(values: set[int]) -> list[str]:
        return [f"{a // 10}.{a % 10}" for a in sorted(values)]

    return fmt(sass), fmt(ptx)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        s, p = archs(Path(arg))
        print(f"{arg}: SASS {' '.join(s) or '-'}; PTX {' '.join(p) or '-'}")
