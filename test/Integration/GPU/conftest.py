"""Setup of the GPU integration tests (run on a Hopper machine, see
docs/GPU.md): the fa3-run to use and the device."""

import os
import pathlib
import shutil
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "test" / "Integration" / "CPU"))


def _has_cuda():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    # Skipped, never passed, where there is no GPU: the reason says why.
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="no CUDA device (or no torch): the GPU tests run on the H200 via scripts/gpu/run.sh")
    for item in items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def fa3_run():
    tool = os.environ.get("FA3_RUN") or shutil.which("fa3-run") or str(REPO / "build" / "bin" / "fa3-run")
    assert os.path.isfile(tool), f"fa3-run not found at {tool}; set FA3_RUN"
    return tool


@pytest.fixture(scope="session")
def fa3_opt():
    tool = os.environ.get("FA3_OPT") or shutil.which("fa3-opt") or str(REPO / "build" / "bin" / "fa3-opt")
    assert os.path.isfile(tool), f"fa3-opt not found at {tool}; set FA3_OPT"
    return tool


@pytest.fixture
def capture_cuda_graph():
    """`capture(step)` -> (a torch.cuda.CUDAGraph of `step()`, its static
    result). `step` runs twice on a side stream first, as torch's CUDA-graph
    docs do: the warm-up compiles fa3's kernels and builds its plans outside
    the capture."""
    import torch

    def capture(step):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static = step()
        return graph, static

    return capture
