#!/usr/bin/env python3
"""The glibc versions that shared libraries need: for each library, the
highest GLIBC_ symbol version it needs and the symbols that need it, and
whether that is no higher than a floor.

    python scripts/glibc_needs.py [--max X.Y] FILE.so|WHEEL.whl ...

A wheel's libraries are read from inside it, and its manylinux_X_Y tag is
the floor unless --max names one. Exits 1 when a library needs a version
above the floor (or an unknown GLIBC_ version), 2 on unreadable input.
Plain Python (no binutils, no pyelftools): it runs where the wheel is
installed with no compiler, and tests/launch/test_packaging.py compares it
with readelf where readelf is found.
"""

import argparse
import re
import struct
import sys
import zipfile

SHT_DYNSYM = 11
SHT_GNU_VERNEED = 0x6FFFFFFE
SHT_GNU_VERSYM = 0x6FFFFFFF
# Version names that are not a release number, and the release that added them.
SPECIAL = {"GLIBC_ABI_DT_RELR": (2, 36)}


class ElfError(Exception):
    pass


def _cstr(blob, offset):
    end = blob.find(b"\0", offset)
    if end < 0:
        raise ElfError(f"string at {offset} not terminated")
    return blob[offset:end].decode("ascii", "replace")


def _sections(data):
    """(type, offset, size, link, info) of each section of a 64-bit
    little-endian ELF file (x86_64 and aarch64, the targets we ship)."""
    if data[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ElfError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    out = []
    for i in range(shnum):
        (_, sh_type, _, _, off, size, link, info, _, _) = struct.unpack_from(
            "<IIQQQQIIQQ", data, shoff + i * shentsize)
        out.append((sh_type, off, size, link, info))
    return out


def version_needs(data):
    """{version name: (library file, [undefined symbols needing it])} of one
    ELF shared library's GNU version requirements (.gnu.version_r)."""
    sections = _sections(data)
    needs = {}  # version index (vna_other) -> (library, version name)
    for sh_type, off, _, link, count in sections:
        if sh_type != SHT_GNU_VERNEED:
            continue
        strtab = data[sections[link][1]:sections[link][1] + sections[link][2]]
        pos = off
        for _ in range(count):
            _, cnt, file_, aux, nxt = struct.unpack_from("<HHIII", data, pos)
            library = _cstr(strtab, file_)
            apos = pos + aux
            for _ in range(cnt):
                _, _, other, name, anext = struct.unpack_from("<IHHII", data, apos)
                needs[other] = (library, _cstr(strtab, name))
                apos += anext
            pos += nxt
    result = {name: (library, []) for library, name in needs.values()}
    # Which undefined dynamic symbols carry each version index.
    dynsym = [s for s in sections if s[0] == SHT_DYNSYM]
    versym = [s for s in sections if s[0] == SHT_GNU_VERSYM]
    if dynsym and versym:
        _, doff, dsize, dlink, _ = dynsym[0]
        strtab = data[sections[dlink][1]:sections[dlink][1] + sections[dlink][2]]
        voff = versym[0][1]
        for i in range(dsize // 24):
            st_name, _, _, st_shndx, _, _ = struct.unpack_from("<IBBHQQ", data, doff + 24 * i)
            index, = struct.unpack_from("<H", data, voff + 2 * i)
            index &= 0x7FFF  # the high bit marks a hidden version
            if st_shndx == 0 and index in needs:
                result[needs[index][1]][1].append(_cstr(strtab, st_name))
    return result


def glibc_release(name):
    """GLIBC_2.3.2 -> (2, 3, 2); None for a version that is not glibc's."""
    if name in SPECIAL:
        return SPECIAL[name]
    m = re.fullmatch(r"GLIBC_(\d+(?:\.\d+)+)", name)
    if m:
        return tuple(int(x) for x in m.group(1).split("."))
    if name.startswith("GLIBC_"):
        return (999,)  # e.g. GLIBC_PRIVATE: no release provides it for sure
    return None


def highest(needs):
    """(release, version name, symbols) of the highest GLIBC_ version."""
    best = ((0,), None, [])
    for name, (_, symbols) in needs.items():
        release = glibc_release(name)
        if release is not None and release > best[0]:
            best = (release, name, sorted(symbols))
    return best


def libraries(path):
    """(name, bytes) of each shared library in a wheel or of one file."""
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as z:
            return [(n, z.read(n)) for n in sorted(z.namelist())
                    if re.search(r"\.so(\.\d+)*$", n)]
    with open(path, "rb") as f:
        return [(path, f.read())]


def wheel_floor(path):
    m = re.search(r"manylinux_(\d+)_(\d+)_", path.rsplit("/", 1)[-1])
    return (int(m.group(1)), int(m.group(2))) if m else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max", help="the glibc floor X.Y (default: a wheel's manylinux tag)")
    ap.add_argument("paths", nargs="+", metavar="FILE")
    args = ap.parse_args(argv)
    if args.max is not None and not re.fullmatch(r"\d+\.\d+", args.max):
        ap.error(f"--max must be X.Y (e.g. 2.17), got {args.max!r}")
    fixed = tuple(int(x) for x in args.max.split(".")) if args.max else None
    status = 0
    for path in args.paths:
        floor = fixed or (wheel_floor(path) if path.endswith(".whl") else None)
        try:
            found = libraries(path)
            if not found:
                raise ElfError("no shared library in it")
            for name, data in found:
                release, version, symbols = highest(version_needs(data))
                verdict = ""
                if floor is not None:
                    ok = release <= floor
                    verdict = (" <= " if ok else " > ") + "%d.%d" % floor
                    verdict += "" if ok else "  FAILED: above the floor"
                    status = status or (0 if ok else 1)
                print(f"{name}: {version or 'no GLIBC_ version'}"
                      f" ({', '.join(symbols) or '-'}){verdict}")
        except (OSError, ElfError, struct.error, zipfile.BadZipFile) as e:
            print(f"{path}: {e}", file=sys.stderr)
            return 2
    return status


if __name__ == "__main__":
    sys.exit(main())
