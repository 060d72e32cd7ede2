"""Build hook for pyproject.toml: runs the project's CMake build of the frontend and packages what
it produces, ``<build>/python/trnsim`` (the .py files and the native module ``_C``), as ``trnsim``.

The build directory is ``$TRNSIM_BUILD_DIR`` when set (an existing build is then only brought up to
date, keeping its own configuration), else ``build/pip``, configured for the running interpreter. ``CMAKE_BUILD_PARALLEL_LEVEL`` limits the compile jobs.
"""
import os
import pathlib
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = pathlib.Path(__file__).resolve().parent


def cmake_build_dir():
    env = os.environ.get("TRNSIM_BUILD_DIR")
    return pathlib.Path(env).resolve() if env else ROOT / "build" / "pip"


def run(cmd):
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT)


class BuildWithCMake(build_py):
    def run(self):
        build = cmake_build_dir()
        # A build named by TRNSIM_BUILD_DIR keeps its own configuration; the default one follows the
        # interpreter running pip (configuring again changes nothing when that is the same).
        if not (build / "CMakeCache.txt").exists() or "TRNSIM_BUILD_DIR" not in os.environ:
            # No .pth into the venv: the installed package, not the build folder, is what imports.
            run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                 f"-DPython3_EXECUTABLE={sys.executable}", "-DTRNSIM_VENV_PTH=OFF"])
        run(["cmake", "--build", build, "--target", "trnsim_python"])

        built = build / "python" / "trnsim"
        native = sorted(built.glob("_C*.so"))
        if not native:
            raise RuntimeError(f"the CMake build left no _C*.so in {built} (is TRNSIM_FRONTEND off there?)")
        super().run()  # the sources of frontend/python/trnsim, so setuptools records them
        target = pathlib.Path(self.build_lib) / "trnsim"
        target.mkdir(parents=True, exist_ok=True)
        for path in sorted(built.rglob("*.py")) + native:
            (target / path.relative_to(built)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / path.relative_to(built))
        # The shipped hardware configs travel with the package (trnsim/__init__.py puts them on
        # TRNSIM_CONFIG_PATH), so an installed wheel does not need this source tree.
        shutil.copytree(ROOT / "configs", target / "configs", dirs_exist_ok=True)


class BinaryDistribution(Distribution):
    # _C is built outside setuptools, which would otherwise tag the wheel pure-Python (py3-none-any).
    def has_ext_modules(self):
        return True


setup(
    packages=["trnsim", "trnsim.nki"],
    # The autoload entry point (pyproject.toml) lives outside the package: see its docstring.
    py_modules=["_trnsim_autoload"],
    package_dir={"": "frontend/python", "trnsim": "frontend/python/trnsim", "trnsim.nki": "frontend/python/trnsim/nki"},
    cmdclass={"build_py": BuildWithCMake},
    distclass=BinaryDistribution,
    # Keep setuptools' scratch out of the source root and away from CMake's build/ layout.
    options={"build": {"build_base": str(ROOT / "build" / "pip" / "setuptools")},
             "egg_info": {"egg_base": str((ROOT / "build" / "pip").relative_to(ROOT))}},
)
