"""Build the shardsafe package: `pip install --no-build-isolation ./python`.

The extension module shardsafe._C is compiled from the binding's C files
and the library's own sources (../src/*/*.c), so the installed package needs
no libshardsafe.so; its dependencies come from pkg-config, the list the
library's own pkg-config file gives (cmake/shardsafe.pc.in: jansson,
libyaml, libcrypto; xxhash).  Nothing is downloaded.
"""

import glob
import os
import platform
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def library_packages():
    """The library's dependencies, from its pkg-config template: one list
    for CMake's consumers and this build (Requires.private, plus xxhash,
    which Debian ships with a pkg-config file the template does not name
    because it links -lxxhash directly)."""
    with open(os.path.join(ROOT, "cmake", "shardsafe.pc.in")) as f:
        for line in f:
            if line.startswith("Requires.private:"):
                return line.split(":", 1)[1].split() + ["libxxhash"]
    raise SystemExit("shardsafe: cmake/shardsafe.pc.in has no Requires.private line")


PKGS = library_packages()


def rel(path):
    # absolute: the compiler places objects under build_temp by their
    # full path, where a "../src" path would escape it
    return os.path.abspath(path)


def pkgconfig(flag):
    try:
        out = subprocess.run(["pkg-config", flag] + PKGS, check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"shardsafe: pkg-config {flag} {' '.join(PKGS)} failed ({e}); "
                         "install pkg-config libjansson-dev libyaml-dev libssl-dev libxxhash-dev "
                         "(scripts/setup.sh)")
    return out.split()


def header_version():
    parts = {}
    with open(os.path.join(ROOT, "include", "shardsafe.h")) as fh:
        for line in fh:
            for p in ("MAJOR", "MINOR", "PATCH"):
                if line.startswith(f"#define SHS_VERSION_{p} "):
                    parts[p] = line.split()[2]
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


AVX2 = os.path.join(ROOT, "src", "common", "hash_avx2.c")
LIB_SOURCES = sorted(glob.glob(os.path.join(ROOT, "src", "**", "*.c"), recursive=True))
X86 = platform.machine() in ("x86_64", "AMD64")


class BuildExt(build_ext):
    """src/common/hash_avx2.c is compiled on its own with -mavx2 (chosen at run
    time by src/common/hash.c), as the CMake build does."""

    def build_extension(self, ext):
        if X86:
            objs = self.compiler.compile(
                [rel(AVX2)], output_dir=self.build_temp, macros=ext.define_macros,
                include_dirs=ext.include_dirs,
                extra_postargs=ext.extra_compile_args + ["-mavx2"])
            ext.extra_objects = list(ext.extra_objects or []) + objs
        super().build_extension(ext)


ext = Extension(
    "shardsafe._C",
    sources=[rel(p) for p in sorted(glob.glob(os.path.join(HERE, "shardsafe", "*.c")))]
    + [rel(p) for p in LIB_SOURCES if p != AVX2 or not X86],
    include_dirs=[os.path.join(ROOT, "include"), os.path.join(ROOT, "src")],
    define_macros=[("_GNU_SOURCE", None), ("_FILE_OFFSET_BITS", "64"),
                   ("SHS_BUILDING_LIBRARY", None)],
    extra_compile_args=["-std=c11", "-fvisibility=hidden"]
    + [f for f in pkgconfig("--cflags") if f.startswith(("-I", "-D"))],
    extra_link_args=pkgconfig("--libs") + ["-lpthread"],
    depends=[rel(p) for p in glob.glob(os.path.join(ROOT, "src", "**", "*.h"), recursive=True)]
    + [rel(os.path.join(ROOT, "include", "shardsafe.h")), "shardsafe/_C.h"],
)

setup(
    name="shardsafe",
    version=header_version(),
    description="Crash-safe, sharded training checkpoints stored as safetensors",
    packages=["shardsafe"],
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExt},
    python_requires=">=3.10",
    install_requires=["numpy"],
)
