"""Common fixtures: seeded data and the real MNIST features shipped with the package."""

import numpy as np
import pytest
import torch

from sklearn_compat.datasets import load_mnist_features


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def mnist_features():
    """Real 64-d features of 5,000 MNIST digits from three networks (``load_mnist_features``)."""
    return load_mnist_features()


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_cuda = pytest.mark.skip(reason="torch sees no CUDA device")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip_cuda)
