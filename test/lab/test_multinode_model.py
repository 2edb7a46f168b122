"""The lab's model of storage reads over many nodes (tools/lab/multinode_model.py): it runs,
its node-aware orders are NodeAwareSampler's, and it agrees with its simulation at small
scale. No mount; about a second."""

import importlib.util
import math
import os
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from epochfs.torch import NodeAwareSampler  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "lab", "multinode_model.py")


def load():
    spec = importlib.util.spec_from_file_location("multinode_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lab = load()


def test_node_aware_orders_are_the_samplers():
    files, nodes, epochs = 400, 4, 3
    ours = lab.node_aware_orders(files, nodes, epochs, 0.2, seed=7)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*not on an epochfs mount")
        for node in range(nodes):
            sampler = NodeAwareSampler(range(files), nodes, node, seed=7, ranks_per_node=1,
                                       exchange=0.2, data_dir="/nonexistent",
                                       paths=["f%d" % i for i in range(files)])
            for e in range(epochs):
                sampler.set_epoch(e)
                assert list(sampler) == ours[node][e]


def test_closed_forms():
    files, nodes, epochs = 6400, 8, 40
    part = files // nodes
    # A cache of D/N with global orders: (N - 1) / (N + 1) of the dataset per epoch.
    steady = lab.global_known(files, nodes, part, epochs)[-1]
    assert steady == pytest.approx((nodes - 1) / (nodes + 1), rel=1e-3)
    # Caches of the whole dataset: N * (1 - (1 - 1/N)^E) over E epochs (issue 22).
    total = lab.global_known(files, nodes, files, epochs).sum()
    assert total == pytest.approx(nodes * (1 - (1 - 1 / nodes) ** epochs))
    # One node with LRU: f + (1 - f) ln(1 - f) hits per epoch, as bench-policy measured.
    f = 0.5
    lru = lab.global_lru(files, 1, f * files, 3)[-1]
    assert 1 - lru == pytest.approx(f + (1 - f) * math.log(1 - f), abs=0.01)
    # Node-aware: the m arrivals per node and epoch, less the few still cached (returns).
    reads = lab.node_aware(files, nodes, 1.1 * part, epochs, 0.1)
    assert reads[0] == 1 and 0.09 < reads[-1] <= 0.1


@pytest.mark.parametrize("capacity", [1.1, 2.0])
def test_model_agrees_with_simulation(capacity):
    files, nodes, epochs = 2000, 4, 5
    cache = round(capacity * files / nodes)
    everywhere = lab.global_orders(files, nodes, epochs, seed=1)
    near = lab.node_aware_orders(files, nodes, epochs, 0.1, seed=1)
    pairs = [
        (lab.global_known(files, nodes, cache, epochs),
         lab.simulate(everywhere, cache, lab.known_future_misses)),
        (lab.global_lru(files, nodes, cache, epochs),
         lab.simulate(everywhere, cache, lab.lru_misses)),
        (lab.node_aware(files, nodes, cache, epochs, 0.1),
         lab.simulate(near, cache, lab.known_future_misses)),
        (lab.peer_fetching(files, nodes, cache, epochs)[1],
         lab.simulate_peers(everywhere, cache)[1]),
    ]
    for model, simulated in pairs:
        assert np.abs(model - simulated).max() < 0.05


def test_the_model_command_runs():
    out = subprocess.run([sys.executable, SCRIPT, "model", "--nodes", "1,64", "--caches",
                          "1.1,all"], check=True, capture_output=True, text=True).stdout
    assert "| 64 | global, known future |" in out
