"""Data sets shipped with the package: real embeddings for examples, tests and benchmarks.

- :func:`load_mnist_features`: 64-d features of the same 5,000 MNIST digits from three
  independently trained networks, a real "model update" pair read from the installed package
  (no download).
"""

from ._mnist import load_mnist_features

__all__ = ["load_mnist_features"]
