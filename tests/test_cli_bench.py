"""`keras-tfm bench`: llama-bench's table on a tiny preset, and its errors."""

import re

import pytest

from keras_tfm.cli import main
from keras_tfm.lite.litert_bench import tokens_per_second

ROW = re.compile(
    r"^\| (?P<model>.+?) +\| +(?P<size>[\d.]+ [MG]iB) \| +(?P<params>[\d.]+ [MB]) "
    r"\| (?P<backend>.+?) +\| +(?P<threads>\d+) \| +(?P<test>\w+) "
    r"\| +(?P<mean>[\d.]+) ± (?P<std>[\d.]+) \|$"
)

# gpt_tiny (zoo/gpt_tiny/config.json): token and position embeddings 64 x 32
# each (the head tied), attention 4 x (32 x 32 + 32), feed-forward
# 32 x 128 + 128 + 128 x 32 + 32, three layer norms 2 x 32.
GPT_TINY_PARAMETERS = 2 * 64 * 32 + 4 * (32 * 32 + 32) + 2 * 32 * 128 + 160 + 3 * 64


def _table(capsys, *options):
    main(["bench", "gpt_tiny", "-p", "8", "-n", "4", "-r", "1", *options])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("CPU: ") and " CPUs" in lines[0], lines
    header = [cell.strip() for cell in lines[1].strip("|").split("|")]
    assert header == ["model", "size", "params", "backend", "threads", "test", "t/s"]
    assert set(lines[2]) <= set("|-: ")
    rows = [ROW.match(line) for line in lines[3:]]
    assert all(rows) and len(rows) == 2, lines
    return [row.groupdict() for row in rows]


@pytest.mark.parametrize(
    "options, backend, threads",
    [
        (("--runtime", "tensorflow"), "TensorFlow XLA", None),
        (("-t", "1"), "LiteRT", "1"),  # the default runtime, as chat runs
    ],
)
def test_the_table_has_both_tests_with_positive_figures(
    capsys, options, backend, threads
):
    rows = _table(capsys, *options)
    assert [row["test"] for row in rows] == ["pp8", "tg4"]
    for row in rows:
        assert row["model"] == "gpt_tiny float32"
        assert row["backend"].startswith(backend)
        assert threads is None or row["threads"] == threads
        assert float(row["mean"]) > 0 and float(row["std"]) == 0  # one repetition
        assert row["params"] == f"{GPT_TINY_PARAMETERS / 1e6:.2f} M"


def test_tokens_per_second_counts_the_timed_calls_only():
    calls = []
    mean, std = tokens_per_second(lambda: calls.append(1), 10, 3)
    assert len(calls) == 4  # a warm-up, then 3 timed
    assert mean > 0 and std >= 0


@pytest.mark.parametrize(
    "options, message",
    [
        (["-p", "0"], "argument -p/--n-prompt: must be a positive integer, got 0"),
        (["-n", "x"], "argument -n/--n-gen: invalid positive_int value: 'x'"),
        (["-t", "-1"], "argument -t/--threads: must be a positive integer, got -1"),
        (["--runtime", "onnx"], "argument --runtime: invalid choice: 'onnx'"),
    ],
)
def test_bad_flags_are_refused_by_name(capsys, options, message):
    with pytest.raises(SystemExit):
        main(["bench", "gpt_tiny", *options])
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "options, message",
    [
        (
            ["-p", "65"],
            "-p must fit the model's max_sequence_length (64). Received: -p 65",
        ),
        (
            ["--runtime", "litert", "--weights", "bfloat16"],
            "--runtime litert takes --weights float32 or int8. "
            "Received: --weights bfloat16",
        ),
    ],
)
def test_settings_the_model_cannot_take_are_refused(options, message):
    with pytest.raises(SystemExit, match=re.escape(message)):
        main(["bench", "gpt_tiny", *options])


def test_a_model_that_is_not_a_causal_lm_is_refused():
    with pytest.raises(SystemExit, match="takes a decoder-only CausalLM"):
        main(["bench", "bert_tiny_test"])
