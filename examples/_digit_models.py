"""Two small embedding models of scikit-learn's bundled digits, for the gallery's examples.

``digit_models()`` trains two small networks with different seeds: their embeddings of the
same digits live in unrelated spaces (an "old" and a "new" model). Seconds on a CPU, no
download. Not a gallery page itself (the leading underscore keeps it out).
"""

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def train_embedder(X, y, seed, dim=32, epochs=20):
    """A small MLP classifier; its penultimate layer is the embedding."""
    torch.manual_seed(seed)
    body = torch.nn.Sequential(
        torch.nn.Linear(X.shape[1], 128), torch.nn.ReLU(), torch.nn.Linear(128, dim)
    )
    head = torch.nn.Linear(dim, int(y.max()) + 1)
    model = torch.nn.Sequential(body, torch.nn.ReLU(), head)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    X, y = torch.from_numpy(X), torch.from_numpy(y)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        for batch in torch.randperm(len(X), generator=generator).split(128):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(X[batch]), y[batch]).backward()
            optimizer.step()

    def embed(Z):
        with torch.no_grad():
            return body(torch.from_numpy(Z)).numpy()

    return embed


def digit_models():
    """The digits split in train/test and two embedders trained with different seeds.

    Returns ``(X_train, X_test, y_train, y_test, old, new)``.
    """
    # Networks this small run fastest on one thread (more only add synchronisation).
    torch.set_num_threads(1)
    digits = load_digits()
    X = (digits.data / 16.0).astype(np.float32)
    X_train, X_test, y_train, y_test = train_test_split(
        X, digits.target, test_size=0.4, stratify=digits.target, random_state=0
    )
    old = train_embedder(X_train, y_train, seed=1)
    new = train_embedder(X_train, y_train, seed=2)
    return X_train, X_test, y_train, y_test, old, new
