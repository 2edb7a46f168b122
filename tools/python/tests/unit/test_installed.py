"""The tests test the package as pip installed it (ctest's python_client installs the build's
wheel into a venv and runs them there), not the source tree beside them."""

import os

import epochfs


def test_the_package_under_test_is_the_installed_one():
    source = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
    where = os.path.realpath(epochfs.__file__)
    assert not where.startswith(source + os.sep), (
        "epochfs was imported from the source tree (%s): run `ctest -R python_client`, which "
        "installs the wheel and tests it" % where)
