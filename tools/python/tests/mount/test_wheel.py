"""The wheel the build makes (EPOCHFS_WHEEL) installs offline into a fresh venv of every Python
here, and its ``python -m epochfs`` publishes to a real mount and reads its stats."""

import os
import shutil
import subprocess
import sys

import pytest

WHEEL = os.environ.get("EPOCHFS_WHEEL", "")


def pythons():
    """Debian's python3, and the python3 first on PATH when it is another interpreter."""
    found = [sys.executable]
    other = shutil.which("python3")
    if other and os.path.realpath(other) != os.path.realpath(sys.executable):
        found.append(other)
    return found


def venv_with_wheel(python, where):
    """A fresh venv of python at where with the wheel installed, offline; its python."""
    subprocess.run([python, "-m", "venv", where], check=True)
    bin_python = os.path.join(where, "bin", "python")
    subprocess.run([bin_python, "-m", "pip", "install", "--quiet", "--no-index",
                    "--disable-pip-version-check", WHEEL], check=True)
    return bin_python


@pytest.mark.skipif(not os.path.isfile(WHEEL), reason="no wheel built (EPOCHFS_WHEEL unset)")
@pytest.mark.parametrize("python", pythons())
def test_the_wheel_installs_offline_into_a_fresh_venv(python, workdir, mount):
    venv_python = venv_with_wheel(python, os.path.join(workdir, "venv"))
    # Outside the source tree, so that only the installed package can be imported.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = lambda *args: subprocess.run([venv_python, *args], cwd=workdir, env=env,
                                       capture_output=True, text=True)
    where = run("-c", "import epochfs; print(epochfs.__version__, epochfs.__file__)")
    assert where.returncode == 0, where.stderr
    assert where.stdout.split()[1].startswith(os.path.join(workdir, "venv"))
    order = os.path.join(workdir, "order.txt")
    names = sorted(os.listdir(os.path.join(mount.path, "train", "class_0")))[:5]
    with open(order, "w") as f:
        f.write("".join("train/class_0/%s\n" % n for n in names))
    published = run("-m", "epochfs", "publish", mount.path, order, "--stream", "venv")
    assert published.returncode == 0, published.stderr
    assert "5 entries published" in published.stdout
    stats = run("-m", "epochfs", "stats", mount.path)
    assert stats.returncode == 0, stats.stderr
    assert "prefetch.last_publish.found: 5" in stats.stdout
    usage = run("-m", "epochfs", "publish")
    assert usage.returncode == 2
