"""What `make install` prints: the package metadata builds without setuptools deprecation warnings."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_metadata_builds_without_setuptools_deprecation_warnings():
    setuptools = pytest.importorskip("setuptools")
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    deprecations = [str(w.message).splitlines()[0] for w in caught
                    if issubclass(w.category, (DeprecationWarning, setuptools.SetuptoolsDeprecationWarning))]
    assert deprecations == []
    assert dist.metadata.get_name() == "gcpgpu"
    # The build that `pip install -e .` runs uses the build-system's setuptools, not this one: it must
    # be new enough to read project.license as an SPDX string (setuptools 77 and later).
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    assert "setuptools>=77" in requires
