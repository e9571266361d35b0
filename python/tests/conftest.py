"""Shared fixtures of the binding's tests (run by ctest as python.pytest
under Debian's /usr/bin/python3, with PYTHONPATH=<build>/python).

mkst (tests/cli/mkst.py) is the independent, pure-Python safetensors
writer/reader written from the format description: the tests check the
binding against it, not the C library against itself.
"""

import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("SHS_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "cli"))


def _tool(env, name):
    """A built program: $SHS_BIN for the CLI, else <SHS_BUILD_DIR>/name."""
    if env == "SHS_BIN":
        path = os.environ.get("SHS_BIN") or shutil.which("shardsafe")
    else:
        build = os.environ.get("SHS_BUILD_DIR")
        path = os.path.join(build, name) if build else None
    if not path or not os.access(path, os.X_OK):
        pytest.skip(f"{name} not found (set {env}; ctest sets it)")
    return path


@pytest.fixture
def cli():
    return _tool("SHS_BIN", "shardsafe")


@pytest.fixture
def build_tool():
    return lambda name: _tool("SHS_BUILD_DIR", name)
