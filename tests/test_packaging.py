"""What a wheel of the package holds: every file the package reads beside its modules is
package data in pyproject.toml. An editable install reads the tree and hides a gap; a wheel
without the selector's table (configs/tables/*.json) ran every call on the hand rules."""

import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "inductor_mm_plugin"


def _package_data_globs() -> list[str]:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    return pyproject["tool"]["setuptools"]["package-data"]["inductor_mm_plugin"]


def _data_files() -> list[pathlib.Path]:
    """The package's files that are not Python modules or their bytecode."""
    return sorted(p for p in PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                  and p.suffix not in (".py", ".pyc"))  # fmt: skip


def test_every_data_file_is_package_data():
    globs = _package_data_globs()
    files = _data_files()
    assert any(p.name == "NVIDIA_H200.json" and p.parent.name == "tables" for p in files)  # the walk sees them
    missing = [str(p.relative_to(PACKAGE)) for p in files
               if not any(p.relative_to(PACKAGE).match(pattern) for pattern in globs)]  # fmt: skip
    assert not missing, f"not package data in pyproject.toml (a wheel would lack them): {missing}"


def test_every_package_data_glob_matches_a_file():
    """A glob that matches nothing names a file that moved."""
    files = [p.relative_to(PACKAGE) for p in _data_files()]
    stale = [pattern for pattern in _package_data_globs() if not any(f.match(pattern) for f in files)]
    assert not stale, stale
