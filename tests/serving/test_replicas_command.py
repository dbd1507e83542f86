"""`keras-tfm serve --replicas N` without Ray: a one-line error naming the
extra, before any model is loaded. (The replicas themselves run in
`benchmarks/serve_replicas.py`, which installs nothing into CI: Ray is a
large extra.)"""

import argparse
import sys

import pytest

from keras_tfm.cli import serve as serve_command


def parse(*argv):
    parser = argparse.ArgumentParser()
    serve_command.add_arguments(parser)
    return parser.parse_args(argv)


def test_replicas_without_ray_name_the_extra_and_load_nothing(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "keras_tfm.serving.replicas", raising=False)
    loaded = []
    monkeypatch.setattr(serve_command, "load", lambda *a: loaded.append(a))
    with pytest.raises(SystemExit, match=r"pip install 'keras-tfm\[ray\]'"):
        serve_command.run(parse("kjv_gpt", "--replicas", "2"))
    assert loaded == []


@pytest.mark.parametrize("count", ["0", "-1", "two"])
def test_replicas_must_be_a_positive_integer(count, capsys):
    with pytest.raises(SystemExit):
        parse("kjv_gpt", "--replicas", count)
    assert "--replicas" in capsys.readouterr().err


def test_without_replicas_the_model_is_served_in_this_process(monkeypatch):
    from keras_tfm.serving import command

    served = []
    monkeypatch.setattr(serve_command, "load", lambda *a: ("model", *a))
    monkeypatch.setattr(command, "run", lambda args, model: served.append(model))
    serve_command.run(parse("kjv_gpt", "--weights", "int8"))
    assert served == [("model", "kjv_gpt", "int8")]
