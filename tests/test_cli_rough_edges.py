"""Command-line options and messages that used to mislead (issue 32's rough edges)."""

import pytest

from sklearn_compat.cli import main


@pytest.mark.parametrize("value", ["nan", "NaN", "1.5", "-0.1", "inf"])
def test_min_retention_must_be_a_number_in_the_unit_interval(tmp_path, capsys, value):
    # A NaN passed the gate (every comparison with it is false); 1.5 could never pass.
    args = ["transform", "--model", "m.skops", "--input", "in.csv", "--output"]
    with pytest.raises(SystemExit) as info:
        main([*args, str(tmp_path / "out.csv"), "--min-retention", value])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(f"argument --min-retention: must be a number in [0, 1], got {value}")
    assert not (tmp_path / "out.csv").exists()
