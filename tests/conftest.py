"""Shared fixtures: seeded data, the real feature file when ../shared is present."""

from pathlib import Path

import numpy as np
import pytest
import torch

# The workplace keeps shared data beside the checkout: <parent>/shared/data.
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SHARED_FEATURES = SHARED_DATA / "mnist5k_features.npz"


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def mnist_features():
    """Real 64-d features of 5,000 MNIST digits from three networks (skips if absent)."""
    if not SHARED_FEATURES.exists():
        pytest.skip(f"{SHARED_FEATURES} not present (only in the project's workplace)")
    with np.load(SHARED_FEATURES) as data:
        return {key: data[key] for key in data.files}


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_cuda = pytest.mark.skip(reason="torch sees no CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip_cuda)
