"""``sklearn-compat search``: the query path from the command line, checked against the API."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import ortho_group

from sklearn_compat import AlignedNeighbors, OrthogonalProcrustesAligner
from sklearn_compat.cli import main
from sklearn_compat.io import OutputLayout, load_model, write_table


@pytest.fixture
def tables(tmp_path, rng):
    n, d = 80, 6
    S = rng.normal(size=(n, d))
    X = (S + 3.0).astype(np.float32)  # new model, one strong common direction
    Y = S @ ortho_group.rvs(d, random_state=0) + 0.4 * rng.normal(size=(n, d)) + 1.0
    Y = Y.astype(np.float32)
    ids = np.array([f"doc{i:02d}" for i in range(n)])
    paths = {name: tmp_path / f"{name}.parquet" for name in ("new", "old")}
    write_table(paths["new"], ids, X, OutputLayout("columns", d, "id", id_dtype=ids.dtype))
    write_table(paths["old"], ids, Y, OutputLayout("list", d, "id", id_dtype=ids.dtype))
    model = tmp_path / "model.skops"
    code = main(
        [
            "fit",
            "--method",
            "procrustes",
            "--source",
            str(paths["new"]),
            "--target",
            str(paths["old"]),
            "--id-column",
            "id",
            "--model",
            str(model),
        ]
    )
    assert code == 0
    return paths, model, ids, X, Y


@pytest.mark.parametrize("extra", [[], ["--gallery-form", "raw"], ["--csls", "5"], ["--no-csls"]])
def test_search_writes_the_api_neighbours(tmp_path, capsys, tables, extra):
    paths, model, ids, X, Y = tables
    out = tmp_path / "hits.csv"
    args = [
        "search",
        "--model",
        model,
        "--gallery",
        paths["old"],
        "--queries",
        paths["new"],
        "--id-column",
        "id",
        "-k",
        "3",
        "--output",
        out,
        *extra,
    ]
    assert main([str(a) for a in args]) == 0
    hits = pd.read_csv(out)
    assert list(hits.columns) == ["query_id", "rank", "gallery_id", "score"]
    assert len(hits) == 3 * len(ids)
    form = "raw" if "raw" in extra else "centered"
    csls = 5 if "--csls" in extra else None if "--no-csls" in extra else 10
    aligner = load_model(model)
    search = AlignedNeighbors(aligner, n_neighbors=3, gallery=form, csls_k=csls).fit(Y)
    dist, idx = search.kneighbors(pd.DataFrame(X, columns=aligner.feature_names_in_))
    np.testing.assert_array_equal(hits["query_id"], np.repeat(ids, 3))
    np.testing.assert_array_equal(hits["rank"], np.tile([1, 2, 3], len(ids)))
    np.testing.assert_array_equal(hits["gallery_id"], ids[idx.ravel()])
    expected = 1 - dist if csls is None else 2 * (1 - dist)
    np.testing.assert_allclose(hits["score"], expected.ravel(), atol=1e-5)
    # Without --force the output is not overwritten; with it, it is.
    assert main([str(a) for a in args]) == 1
    assert "exists" in capsys.readouterr().err
    assert main([str(a) for a in [*args, "--force"]]) == 0


def test_search_errors_are_one_line(tmp_path, capsys, tables):
    paths, model, *_ = tables
    base = ["search", "--model", str(model), "--queries", str(paths["new"]), "--id-column", "id"]
    code = main(
        [*base, "--gallery", str(paths["old"]), "-k", "500", "--output", str(tmp_path / "a.csv")]
    )
    err = capsys.readouterr().err
    assert code == 1 and "n_neighbors = 500" in err and not (tmp_path / "a.csv").exists()
    code = main([*base, "--gallery", str(paths["old"]), "--output", str(tmp_path / "a.txt")])
    assert code == 1 and "results must be .csv" in capsys.readouterr().err
    narrow = tmp_path / "narrow.csv"
    write_table(narrow, np.array(["a", "b"]), np.ones((2, 4)), OutputLayout("columns", 4, "id"))
    code = main([*base, "--gallery", str(narrow), "--output", str(tmp_path / "b.csv")])
    err = capsys.readouterr().err
    assert code == 1 and "narrow.csv" in err and "gallery has 4 features" in err


def test_fit_no_center_gives_the_uncentred_map(tmp_path, tables):
    paths, _, _, X, Y = tables
    model = tmp_path / "plain.skops"
    assert (
        main(
            [
                "fit",
                "--method",
                "procrustes",
                "--source",
                str(paths["new"]),
                "--target",
                str(paths["old"]),
                "--id-column",
                "id",
                "--model",
                str(model),
                "--no-center",
            ]
        )
        == 0
    )
    loaded = load_model(model)
    assert loaded.center is False
    np.testing.assert_array_equal(loaded.mean_y_, np.zeros(Y.shape[1]))
    assert OrthogonalProcrustesAligner().center == "auto"
