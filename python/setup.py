"""Builds and installs the fa3 Python package: the pure-Python `fa3` package
and its extension `fa3._fa3` (python/src/fa3_module.cpp), which links fa3's C
API library. Where jax is installed, also `fa3._fa3_jax`
(python/src/fa3_jax_ffi.cpp: the XLA FFI handlers of `fa3.jax`, built
against the FFI headers of that jaxlib, `jax.ffi.include_dir()`).

    FA3_LIBRARY=/path/to/libfa3.so pip install --no-build-isolation ./python
    FA3_LIBRARY=/path/to/libfa3.so python setup.py build_ext --inplace   # in-tree

FA3_LIBRARY defaults to the build tree's build/lib/libFA3CAPI.so. The
library is found at run time through an rpath to its directory. Needs only
a C++17 compiler, Python headers and pybind11 (no network, no MLIR).
"""
import os
import pathlib

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

here = pathlib.Path(__file__).resolve().parent
root = here.parent
library = pathlib.Path(os.environ.get("FA3_LIBRARY", root / "build" / "lib" / "libFA3CAPI.so")).resolve()
if not library.is_file():
    raise SystemExit(f"fa3: FA3_LIBRARY={library} does not exist; build fa3 (scripts/build.sh) "
                     "or point FA3_LIBRARY at the bundle's libfa3.so")

os.chdir(here)  # setuptools wants paths relative to setup.py
link_args = [f"-L{library.parent}", f"-l:{library.name}", f"-Wl,-rpath,{library.parent}"]
extensions = [Pybind11Extension("fa3._fa3", ["src/fa3_module.cpp"], include_dirs=[str(root / "include")],
                                extra_link_args=link_args, cxx_std=17)]
try:
    import jax.ffi
except ImportError:
    jax = None
if jax is not None:
    extensions.append(Pybind11Extension(
        "fa3._fa3_jax", ["src/fa3_jax_ffi.cpp"],
        include_dirs=[str(root / "include")],
        # -isystem: the warnings of jaxlib's headers are not fa3's.
        extra_compile_args=["-isystem", jax.ffi.include_dir()],
        extra_link_args=link_args, cxx_std=17))

setup(
    name="fa3",
    version="0.1.0",
    description="fa3: an MLIR attention compiler for Hopper, from Python",
    packages=["fa3"],
    ext_modules=extensions,
    cmdclass={"build_ext": build_ext},
    python_requires=">=3.10",
    install_requires=["numpy"],
)
