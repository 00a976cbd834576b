"""The PNG plot of ``sklearn-compat grid``: cross-validated score against lambda."""

import numpy as np

__all__ = ["plot_grid"]


def plot_grid(frame, path, *, n_pairs, cv):
    """Draw mean top-1 (with +- one std) against lambda; reference methods as lines.

    ``lam = inf`` has no place on a numeric axis, so it is drawn one step to the right of
    the largest finite value and labelled "inf"; the axis is symmetric-log so that 0 and
    the usual 1 .. 100 range are both readable.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    grid = frame[frame["method"] == "lambda-orth"].sort_values("lam")
    lams = grid["lam"].to_numpy(dtype=float)
    finite = lams[np.isfinite(lams)]
    top = finite.max() if finite.size else 1.0
    inf_at = max(1.0, top) * 4
    x = np.where(np.isfinite(lams), lams, inf_at)

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.errorbar(
        x, grid["mean_top1"], yerr=grid["std_top1"], marker="o", capsize=3, label="lambda-orth"
    )
    styles = iter(["--", ":", "-."])
    for _, row in frame[frame["method"] != "lambda-orth"].iterrows():
        ax.axhline(
            row["mean_top1"],
            linestyle=next(styles, "--"),
            color="grey",
            label=f"{row['method']} ({row['mean_top1']:.3f})",
        )
    ax.set_xscale("symlog", linthresh=1.0)
    # symlog has room for negative values, which lambda never takes.
    ax.set_xlim(x.min() - 0.5 if x.min() < 1 else x.min() / 2, x.max() * 1.5)
    ticks = sorted(set(x.tolist()))
    ax.set_xticks(ticks)
    ax.set_xticklabels(
        ["inf" if t == inf_at and np.isinf(lams).any() else f"{t:g}" for t in ticks]
    )
    ax.set_xlabel("lambda (orthogonality threshold)")
    ax.set_ylabel(f"paired top-1, {cv}-fold CV")
    ax.set_title(f"Cross-validated lambda grid ({n_pairs} pairs)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
