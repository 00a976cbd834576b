"""Messages that must point the right way: damaged model files, ids of different forms."""

import numpy as np
import pytest

from sklearn_compat import OrthogonalProcrustesAligner
from sklearn_compat.io import Batch, InputError, join_on_ids, load_model, save_model


@pytest.fixture
def model_file(tmp_path, rng):
    X = rng.normal(size=(50, 4))
    path = tmp_path / "model.skops"
    save_model(OrthogonalProcrustesAligner().fit(X, X), path)
    return path


@pytest.mark.parametrize("keep", [0.5, 0.9, 30])
def test_a_truncated_skops_file_is_called_damaged_not_untrusted(model_file, keep):
    data = model_file.read_bytes()
    cut = int(len(data) * keep) if keep < 1 else keep
    model_file.write_bytes(data[:cut])
    with pytest.raises(InputError, match="is damaged or not a model file") as info:
        load_model(model_file)
    assert "--trust" not in str(info.value)
    assert str(model_file) in str(info.value)


def test_a_corrupted_skops_archive_is_called_damaged(model_file):
    data = bytearray(model_file.read_bytes())
    middle = len(data) // 3
    data[middle : middle + 200] = bytes(200)  # inside the archive's members
    model_file.write_bytes(bytes(data))
    with pytest.raises(InputError, match="is damaged or not a model file") as info:
        load_model(model_file)
    assert "--trust" not in str(info.value)


def test_a_text_file_is_not_called_a_pickle(tmp_path):
    path = tmp_path / "notes.skops"
    path.write_text("hello")
    with pytest.raises(InputError, match="neither a skops archive nor a joblib/pickle"):
        load_model(path)


def test_a_pickle_still_asks_for_trust(tmp_path, rng):
    joblib = pytest.importorskip("joblib")
    X = rng.normal(size=(20, 3))
    path = tmp_path / "m.joblib"
    joblib.dump(OrthogonalProcrustesAligner().fit(X, X), path)
    with pytest.raises(InputError, match="pass --trust only if you made it yourself"):
        load_model(path)
    assert load_model(path, trust=True).W_.shape == (3, 3)


class _Reader:
    path, id_column = "table.csv", "id"

    def where(self, row):
        return f"row {row}"


def _join(source_ids, target_ids):
    source = (_Reader(), Batch(0, source_ids, np.zeros((len(source_ids), 2))))
    target = (_Reader(), Batch(0, target_ids, np.zeros((len(target_ids), 2))))
    return join_on_ids(source, target)


def test_zero_padded_text_ids_against_numbers_say_how_many_would_match():
    # CSV ids are text as written ('007'); Parquet/.npy ids may be integers (7).
    source = np.array(["007", "008", "010", "x"], dtype=object)
    with pytest.raises(InputError, match="3 more ids would match if read as numbers"):
        _join(source, np.array([7, 8, 10, 11]))
    _, _, report = _join(source, np.array(["x", "7", "8", "12"], dtype=object))
    assert report.matched == 1 and report.numeric_matches == 2
    assert "2 more ids would match if read as numbers" in report.summary()


def test_ids_of_the_same_form_get_no_numeric_hint():
    _, _, report = _join(np.array(["a", "b"], dtype=object), np.array(["b", "c"], dtype=object))
    assert report.numeric_matches == 0 and "read as numbers" not in report.summary()
    _, _, report = _join(np.array([1, 2, 3]), np.array([2, 3, 4]))
    assert report.numeric_matches == 0
