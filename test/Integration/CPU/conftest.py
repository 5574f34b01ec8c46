"""Shared setup of the CPU integration tests: where the tools are."""

import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "python"))


@pytest.fixture(scope="session")
def fa3_run():
    build = pathlib.Path(os.environ.get("FA3_BUILD_DIR", REPO / "build"))
    tool = build / "bin" / "fa3-run"
    # A missing tool is a failure, not a skip: the suite must not pass
    # without running anything.
    assert tool.is_file(), f"{tool} not built; build first or set FA3_BUILD_DIR"
    return str(tool)


@pytest.fixture(scope="session")
def fa3_opt():
    build = pathlib.Path(os.environ.get("FA3_BUILD_DIR", REPO / "build"))
    tool = build / "bin" / "fa3-opt"
    assert tool.is_file(), f"{tool} not built; build first or set FA3_BUILD_DIR"
    return str(tool)
