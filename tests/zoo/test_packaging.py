import sys
from pathlib import Path

import pytest

import keras_tfm
from keras_tfm.zoo import catalogue

REPO = Path(keras_tfm.__file__).resolve().parent.parent
pytestmark = [
    pytest.mark.skipif(sys.version_info < (3, 11), reason="needs tomllib"),
    pytest.mark.skipif(
        not (REPO / "pyproject.toml").is_file(), reason="not a source checkout"
    ),
]


def setuptools_config():
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_keras_tfm_package_is_listed_for_the_wheel():
    found = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "keras_tfm").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    listed = set(setuptools_config()["packages"])
    missing = sorted(found - listed)
    assert not missing, f"add {missing} to [tool.setuptools] packages in pyproject.toml"


def test_the_zoo_folder_ships_as_the_catalogue_package():
    config = setuptools_config()
    assert config["package-dir"]["keras_tfm._catalogue"] == "zoo"
    assert config["package-data"]["keras_tfm._catalogue"] == ["**/*"]
    assert (REPO / "zoo" / "__init__.py").is_file()
    assert catalogue.default_root().resolve() == (REPO / "zoo").resolve()
