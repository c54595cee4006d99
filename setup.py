"""Ships the top-level templates/ and containers/ inside the wheel as gcpgpu/_bundled/.

The layout keeps them at the top of the repo (where people look for them); an installed gcpgpu
still needs them, so the build copies them into the package. gcpgpu.resources finds either place.
The packaging files go with them: `container build` from a wheel install sends the same build
context a checkout would (gcpgpu/image/build.py sources()).
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUNDLED = ("templates", "containers")
BUNDLED_FILES = ("pyproject.toml", "setup.py", "README.md")


class BuildWithBundled(build_py):
    def run(self):
        super().run()
        root = Path(__file__).parent
        for name in BUNDLED:
            src = root / name
            if src.is_dir():
                dst = Path(self.build_lib) / "gcpgpu" / "_bundled" / name
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for name in BUNDLED_FILES:
            if (root / name).is_file():
                shutil.copyfile(root / name, Path(self.build_lib) / "gcpgpu" / "_bundled" / name)


setup(cmdclass={"build_py": BuildWithBundled})
