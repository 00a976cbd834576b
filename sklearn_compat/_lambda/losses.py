"""Losses of the lambda-orthogonality method: the regulariser and the contrastive terms.

Everything here is a plain torch function of tensors, so the same code serves the
estimator's training loop, skorch nets and users' own layers.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "orthogonality_gap",
    "lambda_orth_penalty",
    "contrastive_loss",
]


def _gram_deviation(weight):
    """``W W^T - I`` on the smaller side of ``weight`` (torch)."""
    if weight.ndim != 2:
        raise ValueError(f"weight must be a 2-d matrix, got shape {tuple(weight.shape)}.")
    # The Gram matrix of the smaller side: for a (k, m) matrix with k < m the larger Gram
    # W^T W has m - k zero eigenvalues, which would add sqrt(m - k) to N even for a matrix
    # with orthonormal rows.
    gram = weight @ weight.T if weight.shape[0] <= weight.shape[1] else weight.T @ weight
    return gram - torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device)


def orthogonality_gap(weight):
    """Distance of a matrix from orthogonality: ``N = ||W W^T - I||_F`` on the smaller side.

    ``N / sqrt(min(W.shape))`` is the root-mean-square deviation of the squared singular
    values of ``W`` from 1, so the same ``N`` is a smaller distortion in a larger space.
    ``N`` is the same for ``W`` and ``W.T``, so it does not matter whether a layer stores
    its weight as (in, out), like the aligners' ``W_``, or (out, in), like
    :class:`torch.nn.Linear`.

    Parameters
    ----------
    weight : ndarray or torch.Tensor of shape (k, m)
        The matrix.

    Returns
    -------
    float or torch.Tensor
        A float for numpy input (computed in float64), a differentiable 0-d tensor for
        tensor input.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_compat.lambda_orth import orthogonality_gap
    >>> orthogonality_gap(np.eye(3)[:2])
    0.0
    >>> round(orthogonality_gap(2 * np.eye(4)), 6)
    6.0
    """
    if isinstance(weight, torch.Tensor):
        return torch.linalg.matrix_norm(_gram_deviation(weight))
    W = np.asarray(weight, dtype=np.float64)
    if W.ndim != 2:
        raise ValueError(f"weight must be a 2-d matrix, got shape {W.shape}.")
    gram = W @ W.T if W.shape[0] <= W.shape[1] else W.T @ W
    return float(np.linalg.norm(gram - np.eye(gram.shape[0])))


def lambda_orth_penalty(weight, lam, sharpness=10.0):
    """The lambda-orthogonality regulariser ``sigmoid(sharpness * (N - lam)) * N``.

    ``N = ||W W^T - I||_F`` on the smaller side of ``W`` (see :func:`orthogonality_gap`).
    The sigmoid is a smooth switch: the penalty is about ``N`` once ``N`` exceeds the
    threshold ``lam`` and fades out below it, so training leaves ``W`` free to be any affine
    map within distance ``lam`` of orthogonality (Ricci et al., NeurIPS 2025).  ``lam=0``
    is soft orthogonality; ``lam=inf`` switches the regulariser off (the result is an
    exact zero, with no work done).

    Add it to your own loss for any linear layer::

        loss = task_loss + lambda_orth_penalty(layer.weight, lam=8.0)

    Parameters
    ----------
    weight : torch.Tensor of shape (k, m)
        The weight to regularise (either storage orientation gives the same value).
    lam : float
        Threshold on ``N``, in ``[0, inf]``.  ``N / sqrt(min(k, m))`` is the RMS deviation
        of the squared singular values from 1, so e.g. ``lam = 0.5 * sqrt(d)`` allows the
        same relative distortion in any dimension ``d``.
    sharpness : float, default=10.0
        Slope ``alpha`` of the sigmoid (not given in the paper): larger is closer to a
        hard hinge at ``lam``.  Below ``lam`` the penalty's slope is about
        ``exp(-alpha (lam - N)) alpha N``; with ``alpha = 1`` that leftover pull holds
        ``N`` well below ``lam`` unless the data loss pulls hard (see
        :class:`LambdaOrthAligner`).

    Returns
    -------
    torch.Tensor
        A differentiable 0-d tensor.

    Examples
    --------
    >>> import math, torch
    >>> from sklearn_compat.lambda_orth import lambda_orth_penalty
    >>> W = 2 * torch.eye(4)                      # N = ||4 I - I||_F = 6
    >>> value = lambda_orth_penalty(W, lam=6.0)   # sigmoid(0) * 6
    >>> round(value.item(), 6)
    3.0
    >>> lambda_orth_penalty(W, lam=math.inf).item()
    0.0
    """
    lam = float(lam)
    if not lam >= 0:
        raise ValueError(f"lam must be in [0, inf], got {lam!r}.")
    if math.isinf(lam):
        return weight.new_zeros(())
    return penalty_of_gap(orthogonality_gap(weight), lam, sharpness)


def penalty_of_gap(N, lam, sharpness):
    """The regulariser's value for a gap ``N`` already computed (a tensor, finite lam)."""
    return torch.sigmoid(sharpness * (N - lam)) * N


def contrastive_loss(queries, keys, labels=None, temperature=0.1):
    """Symmetric InfoNCE between two batches of embeddings, paired or class-supervised.

    Rows are L2-normalised and compared by dot product over ``temperature``.  Without
    ``labels`` row ``i`` of ``keys`` is the one positive of row ``i`` of ``queries``
    (CLIP-style).  With ``labels`` the target distribution of each row is uniform over the
    candidates with its label (multi-positive supervised contrastive, as in StableRep).
    The loss is the average of both directions (queries -> keys and keys -> queries).

    Parameters
    ----------
    queries, keys : torch.Tensor of shape (batch, d)
        Paired rows.
    labels : torch.Tensor of shape (batch,), default=None
        Integer class labels shared by both sides.
    temperature : float, default=0.1

    Returns
    -------
    torch.Tensor
        A 0-d tensor.

    Examples
    --------
    >>> import torch
    >>> from sklearn_compat.lambda_orth import contrastive_loss
    >>> keys = torch.eye(4)
    >>> matched = contrastive_loss(keys, keys, temperature=0.05)
    >>> shuffled = contrastive_loss(keys.flip(0), keys, temperature=0.05)
    >>> bool(matched < 0.01 < shuffled)
    True
    >>> # With labels, rows 0 and 1 (one class) are both positives of each other.
    >>> contrastive_loss(keys, keys, labels=torch.tensor([0, 0, 1, 2])).item() > matched.item()
    True
    """
    # The hot loop of every trained aligner: torch's own normalize is differentiable and
    # never waits on the device; the rows are the training data's, rescaled at fit to
    # ordinary norms, so the plain norm that ranking.unit_rows guards is exact here.
    q = F.normalize(queries, dim=1)
    k = F.normalize(keys, dim=1)
    logits = (q @ k.T) / temperature
    if labels is None:
        target = torch.arange(logits.shape[0], device=logits.device)
        return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))
    same = (labels[:, None] == labels[None, :]).to(logits.dtype)
    # Each row has at least itself as a positive, so the row sums are >= 1.
    target = same / same.sum(dim=1, keepdim=True)
    forward = -(target * F.log_softmax(logits, dim=1)).sum(dim=1).mean()
    backward = -(target * F.log_softmax(logits.T, dim=1)).sum(dim=1).mean()
    return 0.5 * (forward + backward)
