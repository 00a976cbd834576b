"""The affine adapter plus a residual MLP, as a torch module (Drift-Adapter, EMNLP 2025)."""

import torch
from torch import nn

from .adapter import AffineAdapter

__all__ = ["ResidualAdapter"]


class ResidualAdapter(AffineAdapter):
    """``z = x @ weight + bias + relu(x @ W1 + b1) @ W2 + b2``.

    The MLP's output layer starts at zero, so training starts exactly at the affine
    initialisation (the Procrustes map) and the MLP only adds what the data ask for.
    ``weight`` stays the linear part on which the lambda-orthogonality penalty acts.
    """

    def __init__(self, in_features, out_features, hidden, **affine):
        super().__init__(in_features, out_features, **affine)
        self.residual = nn.Sequential(
            nn.Linear(self.in_features, hidden), nn.ReLU(), nn.Linear(hidden, self.out_features)
        )
        with torch.no_grad():
            self.residual[2].weight.zero_()
            self.residual[2].bias.zero_()

    def forward(self, x):
        return super().forward(x) + self.residual(x)
