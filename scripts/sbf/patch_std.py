#!/usr/bin/env python3
"""Make a copy of Rust's std sources build for a target whose `target_os` is "solana".

Upstream std has no branch for Solana. Solana programs are single threaded, have no OS
services, and bring their own global allocator (the entrypoint macro's bump allocator), so
std only needs to compile: Solana is added to the lists of platforms that take std's
"unsupported" / "no threads" implementations (the lists that already name `vexos`), and it
gets an allocator module whose `System` never allocates.

Every edit is anchored on exact text and checked, so a change in the std sources (a new
Debian rustc-web) fails here with the file and the missing anchor, not later in a
confusing compile error.

Usage: patch_std.py SRC_LIBRARY_DIR DEST_ROOT
  Copies SRC_LIBRARY_DIR (…/rust/library) to DEST_ROOT/library and patches the copy.
  DEST_ROOT/library is then usable as __CARGO_TESTS_ONLY_SRC_ROOT for `cargo -Zbuild-std`.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

SOLANA = 'target_os = "solana"'

# (file under library/std/src, anchor text, replacement, count). Each anchor must occur
# exactly `count` times.
EDITS: list[tuple[str, str, str, int]] = []


def add_to_list(rel: str, indent: int, before: str, after: str) -> None:
    """Adds Solana after `vexos` (indented by `indent`) in the cfg list quoted by the lines
    `before` and `after` around it."""
    pad = " " * indent
    vexos = f'{pad}target_os = "vexos",\n'
    anchor = f"{before}\n{vexos}{after}"
    EDITS.append((rel, anchor, anchor.replace(vexos, f"{vexos}{pad}{SOLANA},\n"), 1))


# getrandom: no entropy source on chain; HashMap keys come from the fallback.
add_to_list("sys/random/mod.rs", 8, '        target_os = "xous",', "    ) => {")
add_to_list("sys/random/mod.rs", 4, '    target_os = "xous",', ")))]")
# io::Error: no errno.
add_to_list("sys/io/error/mod.rs", 8, "    any(", '        target_family = "wasm",')
# thread_local!: one thread, plain statics.
add_to_list("sys/thread_local/mod.rs", 8, '        target_os = "trusty",', "    )")
add_to_list("sys/thread_local/mod.rs", 12, '            target_os = "trusty",', "        )")
EDITS += [
    # System allocator: a module that never allocates (programs install their own).
    (
        "sys/alloc/mod.rs",
        '    target_os = "vexos" => {\n        mod vexos;\n    }',
        '    target_os = "vexos" => {\n        mod vexos;\n    }\n'
        f"    {SOLANA} => {{\n        mod solana;\n    }}",
        1,
    ),
    # MIN_ALIGN has no entry for the bpf arch; Solana's heap allocator aligns to 8.
    (
        "sys/alloc/mod.rs",
        '    target_arch = "xtensa",\n)) {\n    8',
        '    target_arch = "xtensa",\n    target_arch = "bpf",\n)) {\n    8',
        1,
    ),
    # RandomState: a per-thread key counter would be a writable global, which SBF
    # programs cannot have, and on-chain execution must be deterministic anyway.
    (
        "hash/random.rs",
        "    pub fn new() -> RandomState {\n",
        "    pub fn new() -> RandomState {\n"
        f"        #[cfg({SOLANA})]\n"
        "        return RandomState { k0: 0x736f6c616e61, k1: 0x737663706179 };\n"
        f"        #[cfg(not({SOLANA}))]\n"
        "        {\n",
        1,
    ),
    (
        "hash/random.rs",
        "            RandomState { k0, k1 }\n        })\n    }\n",
        "            RandomState { k0, k1 }\n        })\n        }\n    }\n",
        1,
    ),
    # std::env::consts::OS
    (
        "sys/env_consts.rs",
        '#[cfg(target_os = "vexos")]\npub mod os {',
        f"#[cfg({SOLANA})]\npub mod os {{\n"
        '    pub const FAMILY: &str = "";\n'
        '    pub const OS: &str = "solana";\n'
        '    pub const DLL_PREFIX: &str = "";\n'
        '    pub const DLL_SUFFIX: &str = ".so";\n'
        '    pub const DLL_EXTENSION: &str = "so";\n'
        '    pub const EXE_SUFFIX: &str = ".so";\n'
        '    pub const EXE_EXTENSION: &str = "so";\n'
        "}\n\n"
        '#[cfg(target_os = "vexos")]\npub mod os {',
        1,
    ),
]

SOLANA_ALLOC = """\
//! Solana programs install their own `#[global_allocator]` (the entrypoint's bump
//! allocator over the runtime-provided heap); `System` is never used, so it refuses.
use crate::alloc::{GlobalAlloc, Layout, System};

#[stable(feature = "alloc_system_type", since = "1.28.0")]
unsafe impl GlobalAlloc for System {
    #[inline]
    unsafe fn alloc(&self, _layout: Layout) -> *mut u8 {
        crate::ptr::null_mut()
    }

    #[inline]
    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
}
"""


def patch(src_library: Path, dest_root: Path) -> None:
    lib = dest_root / "library"
    if lib.exists():
        shutil.rmtree(lib)
    shutil.copytree(src_library, lib, symlinks=True)
    std_src = lib / "std" / "src"
    for rel, anchor, replacement, count in EDITS:
        path = std_src / rel
        text = path.read_text()
        found = text.count(anchor)
        if found != count:
            sys.exit(
                f"patch_std: {path}: expected {count} occurrence(s) of anchor, found {found}:\n"
                f"{anchor}\nThe std sources changed shape; update scripts/sbf/patch_std.py."
            )
        path.write_text(text.replace(anchor, replacement))
    (std_src / "sys" / "alloc" / "solana.rs").write_text(SOLANA_ALLOC)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    patch(Path(sys.argv[1]), Path(sys.argv[2]))
