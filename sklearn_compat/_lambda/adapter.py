"""The affine adapter as a torch module (used by LambdaOrthAligner and skorch nets)."""

import numpy as np
import torch
from torch import nn
from torch.nn.utils.parametrizations import orthogonal

__all__ = ["AffineAdapter"]


class AffineAdapter(nn.Module):
    """``z = x @ weight + bias``, with ``weight`` stored as (in_features, out_features).

    The weight is stored the way the aligners report ``W_`` (rows index the input space),
    the transpose of :class:`torch.nn.Linear`; :func:`~sklearn_compat.lambda_orth.
    lambda_orth_penalty` gives the same value for either orientation.

    Parameters
    ----------
    in_features, out_features : int
        Widths of the input and output spaces.
    bias : bool, default=True
        Learn an additive bias.
    strict : bool, default=False
        Keep ``weight`` exactly orthogonal (orthonormal rows or columns when rectangular)
        through :func:`torch.nn.utils.parametrizations.orthogonal`: the matrix exponential
        of a skew-symmetric matrix when square, as in the paper's strict variant,
        Householder products otherwise.
    weight, bias_init : array-like, default=None
        Initial values; by default an identity (truncated when rectangular) and zeros.
        With ``strict`` the initial weight must be orthogonal.

    Examples
    --------
    >>> import torch
    >>> from sklearn_compat.lambda_orth import AffineAdapter, lambda_orth_penalty
    >>> adapter = AffineAdapter(8, 4)
    >>> adapter(torch.ones(2, 8)).shape
    torch.Size([2, 4])
    >>> lambda_orth_penalty(adapter.weight, lam=0.0).item()
    0.0
    """

    def __init__(
        self, in_features, out_features, bias=True, strict=False, weight=None, bias_init=None
    ):
        super().__init__()
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        if weight is None:
            weight = torch.eye(self.in_features, self.out_features)
        self.weight = nn.Parameter(torch.as_tensor(np.asarray(weight), dtype=torch.float32))
        if tuple(self.weight.shape) != (self.in_features, self.out_features):
            raise ValueError(
                f"weight must have shape ({self.in_features}, {self.out_features}), "
                f"got {tuple(self.weight.shape)}."
            )
        if bias:
            init = torch.zeros(self.out_features) if bias_init is None else bias_init
            self.bias = nn.Parameter(torch.as_tensor(np.asarray(init), dtype=torch.float32))
        else:
            self.register_parameter("bias", None)
        if strict:
            start = self.weight.detach().clone()
            orthogonal(self, "weight")
            with torch.no_grad():
                # Assigning through the parametrisation stores the start point exactly
                # (it must be orthogonal, which every initialisation we use is).
                self.weight = start

    def forward(self, x):
        if self.bias is None:
            return x @ self.weight
        return torch.addmm(self.bias, x, self.weight)
