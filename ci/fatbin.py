"""Lists the CUDA machine code (SASS) and PTX archs embedded in an ELF shared
object or object file, and their payloads, by reading its .nv_fatbin section (works on compressed fatbins and
without cuobjdump, which system CUDA 13 here and the PyPI toolchain lack; ci/device_code.py compares two builds'
device code with cuobjdump too)."""

from __future__ import annotations

import struct
import sys
from collections.abc import Callable
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


def entries(path: Path) -> list[tuple[str, str, bytes]]:
    """Every entry of the .nv_fatbin section of an ELF file (a shared library or an object file), in order: (kind
    "sass" or "ptx", arch "X.Y", payload: the cubin or PTX as stored, compressed where the build compressed it). The
    entry headers are left out: they describe the host the fatbin was made for (its address size and OS), which
    differs between an x86_64 and an aarch64 build of the same device code."""
    blob = _section(path.read_bytes(), ".nv_fatbin")
    out: list[tuple[str, str, bytes]] = []
    if blob is None:
        return out
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
            start = entry + entry_header
            out.append(
                ("ptx" if kind == KIND_PTX else "sass", f"{arch // 10}.{arch % 10}", blob[start : start + payload])
            )
            entry += entry_header + payload
        pos = end
    return out


def archs(path: Path) -> tuple[list[str], list[str]]:
    """(sass, ptx) as sorted "X.Y" strings."""
    found = entries(path)

    def fmt(kind: str) -> list[str]:
        return sorted({a for k, a, _ in found if k == kind}, key=arch_number)

    return fmt("sass"), fmt("ptx")


def by_arch(path: Path) -> dict[tuple[str, str], list[bytes]]:
    """The payloads of each (kind, arch), in the order the fatbin holds them."""
    out: dict[tuple[str, str], list[bytes]] = {}
    for kind, arch, payload in entries(path):
        out.setdefault((kind, arch), []).append(payload)
    return out


def arch_number(arch: str) -> tuple[int, ...]:
    """'10.0' -> (10, 0): archs sort by number, not as text."""
    return tuple(map(int, arch.split(".")))


def compare_groups(left: dict, right: dict, judge: Callable[[list, list], str]) -> dict[tuple[str, str], str]:
    """Per (kind, arch) key of either side, in kind and arch order: "only in A" / "only in B", or what `judge` says of
    the two sides' lists."""
    out = {}
    for key in sorted(set(left) | set(right), key=lambda k: (k[0], arch_number(k[1]))):
        if key not in right:
            out[key] = "only in A"
        elif key not in left:
            out[key] = "only in B"
        else:
            out[key] = judge(left[key], right[key])
    return out


def compare(a: Path, b: Path) -> dict[tuple[str, str], str]:
    """Per (kind, arch) of either file: "same" where both hold the same payloads in the same order, "only in A" /
    "only in B", or "differs"."""
    return compare_groups(by_arch(a), by_arch(b), lambda x, y: "same" if x == y else "differs")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        s, p = archs(Path(arg))
        print(f"{arg}: SASS {' '.join(s) or '-'}; PTX {' '.join(p) or '-'}")
