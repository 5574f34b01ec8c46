"""Shared setup of the CPU integration tests: where the tools are."""

import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "python"))


def _tool(name):
    build = pathlib.Path(os.environ.get("FA3_BUILD_DIR", REPO / "build"))
    tool = build / "bin" / name
    # A missing tool is a failure, not a skip: the suite must not pass
    # without running anything.
    assert tool.is_file(), f"{tool} not built; build first or set FA3_BUILD_DIR"
    return str(tool)


@pytest.fixture(scope="session")
def fa3_run():
    return _tool("fa3-run")


@pytest.fixture(scope="session")
def fa3_opt():
    return _tool("fa3-opt")
