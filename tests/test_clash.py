"""The import-time warning about the unrelated ``sklearn-compat`` distribution."""

from importlib import metadata
from pathlib import Path

import pytest

from sklearn_compat import _clash


def _fake_version(installed):
    def version(name):
        if name in installed:
            return installed[name]
        raise metadata.PackageNotFoundError(name)

    return version


def test_warns_when_the_unrelated_distribution_is_installed(monkeypatch):
    monkeypatch.setattr(_clash.metadata, "version", _fake_version({"sklearn-compat": "0.1.3"}))
    with pytest.warns(UserWarning, match=r"'sklearn-compat' \(version 0\.1\.3\).*sklearn_compat"):
        assert _clash.warn_if_clashing_distribution() is True


def test_silent_without_the_unrelated_distribution(monkeypatch, recwarn):
    monkeypatch.setattr(
        _clash.metadata, "version", _fake_version({"sklearn-embedding-compat": "0.1.0"})
    )
    assert _clash.warn_if_clashing_distribution() is False
    assert not [w for w in recwarn if "sklearn-compat" in str(w.message)]


def test_our_distribution_name_differs_from_the_clashing_one():
    assert _clash.OUR_DISTRIBUTION != _clash.CLASHING_DISTRIBUTION
    # The name pyproject.toml gives the distribution is the one the warning names.
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    assert f'name = "{_clash.OUR_DISTRIBUTION}"' in pyproject.read_text()
