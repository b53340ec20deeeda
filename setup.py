"""Builds fastdyn's C++ with CMake (Release) against the installed torch, pybind11 and LLVM 19.

Use `pip install --no-build-isolation -e .` so the build sees the torch already installed
(scripts/setup.sh does this). The CMake build tree is build/py3XX and is reused between builds.
"""
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = ROOT / "build" / f"py{sys.version_info.major}{sys.version_info.minor}"
        build_dir.mkdir(parents=True, exist_ok=True)
        cfg = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DFASTDYN_BUILD_TESTS={os.environ.get('FASTDYN_BUILD_TESTS', 'ON')}",
        ]
        subprocess.check_call(cfg)
        jobs = os.environ.get("FASTDYN_BUILD_JOBS", "2")
        subprocess.check_call(["cmake", "--build", str(build_dir), "-j", jobs])
        # CMake writes _C into python/fastdyn; a non-editable build also needs it in build_lib.
        built = ROOT / "python" / "fastdyn" / Path(self.get_ext_filename("fastdyn._C")).name
        dest = Path(self.get_ext_fullpath(ext.name))
        if built.resolve() != dest.resolve():
            dest.parent.mkdir(parents=True, exist_ok=True)
            self.copy_file(str(built), str(dest))
            launcher = ROOT / "python" / "fastdyn" / "bin" / "fastdyn"
            (dest.parent / "bin").mkdir(exist_ok=True)
            self.copy_file(str(launcher), str(dest.parent / "bin" / "fastdyn"))


setup(
    name="fastdyn",
    version="0.1.0",
    description="A native JIT for unmodified PyTorch programs",
    package_dir={"": "python"},
    packages=find_packages("python"),
    ext_modules=[Extension("fastdyn._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    # torch.compile(model, backend="fastdyn") without importing fastdyn first (dynamo_backend.py).
    entry_points={"torch_dynamo_backends": ["fastdyn = fastdyn.dynamo_backend:fastdyn_backend"]},
    python_requires=">=3.11,<3.13",
    zip_safe=False,
)
