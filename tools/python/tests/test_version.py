"""epochfs.__version__ is the version pyproject.toml gives the package."""

import os
import re

import pytest

import epochfs


def test_the_version_is_the_packages():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11
    pyproject = os.path.join(os.path.dirname(__file__), "..", "pyproject.toml")
    with open(pyproject, "rb") as f:
        assert tomllib.load(f)["project"]["version"] == epochfs.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", epochfs.__version__)
