"""Exporting a linear map into a sentence-transformers model folder (the query side).

The written folder is a copy of the encoder's folder (the *new* model) with the map
appended as a standard ``Dense`` module (weight ``W^T``, bias ``b``, identity activation)
after every module of the encoder, its pooling and its ``Normalize`` included.  Plain
sentence-transformers loads it, with no custom code and no ``trust_remote_code``, and
``SentenceTransformer(folder).encode(texts)`` returns ``transform(encoder.encode(texts))``:
new-model queries arrive in the old model's space, ready for the old index.

Why after ``Normalize``: the map was fitted on the vectors the encoder returns, which
are unit vectors when the encoder ends in ``Normalize``; the map must see exactly those.
Why no ``Normalize`` after the map: ``transform`` does not re-normalise (its output is
what the estimator was scored on), and cosine retrieval, inner-product search of a
unit-normalised index and L2 search of a unit-normalised index all rank a query's
neighbours the same whatever the query's own length.  ``encode(...,
normalize_embeddings=True)`` gives unit vectors where a store wants them.

The folder is staged next to the destination and renamed into place only once written
and checked (the exported model is loaded back and must reproduce the map on probe
sentences), so it appears whole or not at all; the encoder's folder is only read.
"""

import glob
import json
import logging
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..exceptions import InputError
from ._write import _is_running

__all__ = ["write_sentence_transformers"]

# modules.json types of the appended modules.  The ``sentence_transformers.models`` names
# are the ones every release since 2.0 resolves (6.x through its alias table).
_DENSE_TYPE = "sentence_transformers.models.Dense"
_NORMALIZE_TYPE = "sentence_transformers.models.Normalize"
# The activation as sentence-transformers writes it; ``torch.`` names load without
# trust_remote_code.
_IDENTITY = "torch.nn.modules.linear.Identity"
# Sentences encoded by the encoder and by the written model to check the export.
_PROBE = (
    "A new model embeds the queries.",
    "The old index keeps serving while the gallery is re-embedded.",
    "Short text.",
    "Retrieval through the map ranks the same neighbours as transform.",
)
# Written beside the Dense module's weights: which map it is (sentence-transformers reads
# only config.json and the weights), and the mark that refuses mapping an export again.
MARKER = "sklearn_compat.json"
# The written model must reproduce the map within this share of its largest output.
_CHECK_RTOL = 1e-4


def read_modules(encoder):
    """The parsed ``modules.json`` of a sentence-transformers folder; refuses anything else."""
    folder = Path(encoder)
    if not folder.is_dir():
        raise InputError(
            "not a folder: --encoder takes a sentence-transformers model folder (one "
            "written by SentenceTransformer.save)",
            path=str(encoder),
        )
    listing = folder / "modules.json"
    if not listing.is_file():
        raise InputError(
            "not a sentence-transformers model folder: it has no modules.json (save the "
            "model with SentenceTransformer(...).save(DIR) first)",
            path=str(encoder),
        )
    try:
        modules = json.loads(listing.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"not valid JSON ({exc})", path=str(listing)) from None
    keys = {"idx", "name", "path", "type"}
    if (
        not isinstance(modules, list)
        or not modules
        or not all(isinstance(m, dict) and keys <= set(m) for m in modules)
    ):
        raise InputError(
            "not a sentence-transformers module list (a JSON list of objects with idx, "
            "name, path and type)",
            path=str(listing),
        )
    for module in modules:
        marker = folder / str(module["path"]) / MARKER
        if str(module["path"]) and marker.is_file():
            raise InputError(
                f"already ends in a map exported by sklearn_compat (module {module['path']!r}"
                f", see {MARKER}): export onto the new model's own folder, not onto an export",
                path=str(encoder),
            )
    return modules


def write_sentence_transformers(
    W, b, encoder, path, *, force=False, normalize_input=False, provenance=None
):
    """Write ``encoder`` followed by the map ``x @ W + b`` as a sentence-transformers folder.

    ``provenance`` (a JSON-able dict: the estimator, its fingerprint) is written with the
    map's module as ``sklearn_compat.json``.

    Returns ``(path, info)``: the folder written and a dict with ``in_features``,
    ``out_features``, ``encoder_normalizes`` (whether the encoder ends in ``Normalize``)
    and ``modules`` (the types of the written model's modules, in order).
    """
    encoder = Path(encoder)
    modules = read_modules(encoder)
    out = _StagedFolder(path, force=force, protected=encoder)
    try:
        st = _sentence_transformers()
        source = _load(st, encoder, encoder)
        probe = np.asarray(_encode(source, normalize_input), dtype=np.float64)
        del source
        width = probe.shape[1]
        if W.shape[0] != width:
            raise InputError(
                f"the map takes {W.shape[0]}-d vectors but this encoder outputs {width}-d "
                "ones: export the map onto the model whose embeddings it was fitted on",
                path=str(encoder),
            )
        shutil.copytree(
            encoder, out.tmp, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git")
        )
        added = []
        if normalize_input:
            added.append((_NORMALIZE_TYPE, "Normalize", None))
        added.append((_DENSE_TYPE, "Dense", (W, b)))
        written = list(modules)
        for kind, stem, weights in added:
            entry = _new_entry(written, out.tmp, kind, stem)
            folder = out.tmp / entry["path"]
            folder.mkdir()
            if weights is not None:
                _write_dense(folder, *weights)
                about = {"in_features": int(W.shape[0]), "out_features": int(W.shape[1])}
                about.update(provenance or {})
                (folder / MARKER).write_text(
                    json.dumps(about, indent=2, default=str), encoding="utf-8"
                )
            written.append(entry)
        (out.tmp / "modules.json").write_text(json.dumps(written, indent=2), encoding="utf-8")
        _note_in_card(out.tmp, W.shape, normalize_input)
        _check(st, out.tmp, path, probe @ W + b, normalize_input)
        out.commit()
    except BaseException:
        out.abort()
        raise
    info = {
        "in_features": int(W.shape[0]),
        "out_features": int(W.shape[1]),
        "encoder_normalizes": _ends_in_normalize(modules),
        "modules": [m["type"] for m in written],
    }
    return out.path, info


def _sentence_transformers():
    try:
        import sentence_transformers
    except ImportError:
        raise ImportError(
            "exporting to sentence-transformers needs the sentence-transformers package: "
            "pip install sentence-transformers (or the 'sentence-transformers' extra of "
            "sklearn-embedding-compat)"
        ) from None
    return sentence_transformers


def _load(st, folder, shown):
    """The model in ``folder`` on the CPU, from local files only, without custom code."""
    try:
        with _quiet():
            return st.SentenceTransformer(
                str(folder), device="cpu", local_files_only=True, trust_remote_code=False
            )
    except Exception as exc:  # noqa: BLE001 - any loading failure is one line
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(
            f"sentence-transformers cannot load this folder without custom code: {reason}",
            path=str(shown),
        ) from None


@contextmanager
def _quiet():
    """No progress bar or INFO lines from transformers while a model loads (a batch log
    gets the command's own line)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - sentence-transformers requires transformers
        yield
        return
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    st_logger = logging.getLogger("sentence_transformers")
    level = st_logger.level
    st_logger.setLevel(max(level, logging.WARNING))
    try:
        yield
    finally:
        st_logger.setLevel(level)
        if bars:
            hf_logging.enable_progress_bar()


def _encode(model, normalize):
    return model.encode(
        list(_PROBE),
        convert_to_numpy=True,
        normalize_embeddings=normalize,
        show_progress_bar=False,
    )


def _ends_in_normalize(modules):
    last = sorted(modules, key=lambda m: m["idx"])[-1]["type"]
    return last.rsplit(".", 1)[-1] == "Normalize"


def _new_entry(modules, folder, kind, stem):
    """A modules.json entry whose index, name and folder the model does not use yet."""
    idx = max(int(m["idx"]) for m in modules) + 1
    names = {str(m["name"]) for m in modules}
    paths = {str(m["path"]) for m in modules}
    name = str(idx)
    while name in names:
        name = f"{name}_map"
    sub = f"{idx}_{stem}"
    while sub in paths or (folder / sub).exists():
        sub = f"{sub}_map"
    return {"idx": idx, "name": name, "path": sub, "type": kind}


def _write_dense(folder, W, b):
    """``config.json`` and ``model.safetensors`` as ``Dense.save`` writes them.

    Only the four settings every release's ``Dense`` accepts are written, so older
    releases (which pass the whole config to the constructor) load it too.  ``Dense.load``
    reads ``model.safetensors`` since sentence-transformers 3.1 (before: only a pickled
    ``pytorch_model.bin``, which is not written).
    """
    from safetensors.numpy import save_file

    config = {
        "in_features": int(W.shape[0]),
        "out_features": int(W.shape[1]),
        "bias": True,
        "activation_function": _IDENTITY,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    tensors = {
        # torch.nn.Linear computes x @ weight.T + bias with weight (out, in).
        "linear.weight": np.ascontiguousarray(W.T, dtype=np.float32),
        "linear.bias": np.ascontiguousarray(b, dtype=np.float32),
    }
    save_file(tensors, str(folder / "model.safetensors"))


def _note_in_card(folder, shape, normalize_input):
    """Say in the copied model card (README.md, if any) what was appended."""
    card = folder / "README.md"
    if not card.is_file():
        return
    before = "a Normalize module, then " if normalize_input else ""
    note = (
        "\n\n## Mapped into another model's space\n\n"
        "This copy of the model ends in "
        f"{before}a linear map ({shape[0]} -> {shape[1]} dimensions, a sentence-transformers "
        "`Dense` module with identity activation) written by sklearn_compat: `encode` "
        "returns vectors in the space of the model the map was fitted to, so they search "
        "that model's existing index.\n"
    )
    with open(card, "a", encoding="utf-8") as handle:
        handle.write(note)


def _check(st, folder, shown, expected, normalize_input):
    """Load the written folder and compare its output with the map's on the probe."""
    written = _load(st, folder, shown)
    got = np.asarray(_encode(written, False), dtype=np.float64)
    scale = max(1.0, float(np.abs(expected).max()))
    worst = float(np.abs(got - expected).max()) if got.shape == expected.shape else np.inf
    if not worst <= _CHECK_RTOL * scale:
        raise InputError(
            f"the written model does not reproduce the map (largest difference {worst:.3g}); "
            "nothing written",
            path=str(shown),
        )


class _StagedFolder:
    """A hidden folder next to ``path`` that becomes ``path`` on :meth:`commit`.

    The same promise as :class:`~sklearn_compat.io.AtomicOutput` for a folder: an
    existing ``path`` is refused unless ``force``, and is replaced only once the new
    folder is complete (moved aside, the new one renamed in, the old one removed).
    """

    def __init__(self, path, *, force=False, protected=None):
        self.path = Path(path)
        self.force = force
        where = str(path)
        if protected is not None:
            mine, theirs = self.path.resolve(), Path(protected).resolve()
            if mine == theirs or theirs in mine.parents or mine in theirs.parents:
                raise InputError(
                    "is the encoder's folder, inside it or around it: write the export "
                    "elsewhere (the encoder is never changed)",
                    path=where,
                )
        if (self.path.exists() or self.path.is_symlink()) and not force:
            raise InputError("already exists (pass --force to overwrite it)", path=where)
        parent = self.path.parent
        if not parent.is_dir():
            raise InputError(f"directory {str(parent)!r} does not exist", path=where)
        _remove_stale(self.path)
        try:
            self.tmp = Path(
                tempfile.mkdtemp(
                    dir=parent, prefix=f"{_prefix(self.path)}{os.getpid()}.", suffix=".part"
                )
            )
        except OSError as exc:
            raise InputError(f"cannot write: {exc.strerror}", path=where) from None
        self._done = False

    def commit(self):
        if self._done:
            return
        if (self.path.exists() or self.path.is_symlink()) and not self.force:
            self.abort()
            raise InputError(
                "was created by someone else while this command ran; nothing written",
                path=str(self.path),
            )
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.tmp, 0o777 & ~umask)
        old = None
        if self.path.exists() or self.path.is_symlink():
            old = self.tmp.with_name(self.tmp.name[: -len(".part")] + ".old")
            os.rename(self.path, old)
        os.rename(self.tmp, self.path)
        self._done = True
        if old is not None:
            _remove(old)

    def abort(self):
        if self._done:
            return
        self._done = True
        shutil.rmtree(self.tmp, ignore_errors=True)


def _prefix(path):
    return f".{path.name}."


def _remove(path):
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except OSError:
            pass


def _remove_stale(path):
    """Delete staging folders of ``path`` left by runs that were killed (SIGKILL, a crash)."""
    prefix = _prefix(path)
    for candidate in path.parent.glob(f"{glob.escape(prefix)}*.part"):
        pid = candidate.name[len(prefix) :].split(".", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _is_running(int(pid)):
            _remove(candidate)
