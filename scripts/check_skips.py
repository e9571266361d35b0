#!/usr/bin/env python3
"""Fail when ctest skipped a test that must run in this build.

Usage: check_skips.py JUNIT.xml BUILD
ctest writes JUnit XML (--output-junit); a test that exits 77 (our skip
code) or is not run is "skipped" there.  .ci/expected-skips lists, per
build (normal, asan, tsan), the tests that may skip in it and why; any
other skip fails, and so does an expected skip that did not happen (the
list must stay true).
"""
import os
import sys
import xml.etree.ElementTree as ET


def expected(build):
    path = os.path.join(os.path.dirname(__file__), "..", ".ci", "expected-skips")
    want = set()
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            b, name = line.split(None, 1)
            if b == build:
                want.add(name.strip())
    return want


def main():
    junit, build = sys.argv[1], sys.argv[2]
    root = ET.parse(junit).getroot()
    skipped, ran = set(), 0
    for tc in root.iter("testcase"):
        ran += 1
        status = tc.get("status", "")
        if tc.find("skipped") is not None or status in ("notrun", "disabled"):
            skipped.add(tc.get("name"))
    want = expected(build)
    bad = sorted(skipped - want)
    gone = sorted(want - skipped)
    print(f"skips ({build}): {len(skipped)} of {ran} tests skipped"
          + (f": {', '.join(sorted(skipped))}" if skipped else ""))
    if bad:
        print(f"check_skips: tests skipped that must run in the {build} build: {', '.join(bad)}")
    if gone:
        print(f"check_skips: .ci/expected-skips lists skips that did not happen in {build}: "
              f"{', '.join(gone)} (remove them)")
    return 1 if bad or gone else 0


if __name__ == "__main__":
    sys.exit(main())
