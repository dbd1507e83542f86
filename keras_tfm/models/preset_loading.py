"""`from_preset` on every backbone and task, without importing the zoo.

The zoo builds models, so models cannot import it (an import ring). Instead
the zoo registers its loader here when it is imported, and `from_preset`
calls it: the dependency points downwards. keras-tfm imports the zoo as
soon as Keras and keras_tfm's models are both imported
(`keras_tfm._registration`), so the loader is there before any model class
can be used.
"""

_loader = None


def register_preset_loader(loader):
    """Sets `loader(name, **overrides) -> model`; the zoo calls this once."""
    global _loader
    _loader = loader


class PresetMixin:
    """Gives a model class `from_preset`, checking what it returns.

    `CausalLM.from_preset("kjv_gpt")` is the zoo's model; a backbone class
    asked for a task's preset returns that task's backbone
    (`DecoderBackbone.from_preset("kjv_gpt")`), as keras-hub's do.
    """

    @classmethod
    def from_preset(cls, name, **overrides):
        """Builds preset `name` (see `keras_tfm.zoo.list_presets`) as this class.

        Args:
            name: a preset name, or the path of a preset folder
                ("./my_preset", as `keras_tfm.zoo.save_preset` writes it).
            **overrides: constructor arguments replacing the stored ones
                (e.g. `dropout=0.0`); see `keras_tfm.zoo.from_preset`.

        Returns:
            The model, with its weights, tokenizer and preprocessor; for a
            backbone class, the preset model's backbone.

        Example:
        >>> llm = keras_tfm.models.CausalLM.from_preset("gpt_tiny")
        >>> type(llm.backbone).__name__
        'DecoderBackbone'
        """
        if _loader is None:  # only while keras_tfm's own import is under way
            raise RuntimeError(
                "keras_tfm.zoo is not imported yet, so no preset can be "
                "loaded: `import keras_tfm.zoo` first."
            )
        model = _loader(name, **overrides)
        if isinstance(model, cls):
            return model
        backbone = getattr(model, "backbone", None)
        if isinstance(backbone, cls):
            return backbone
        raise ValueError(
            f"Preset {name!r} is a {type(model).__name__}, not a {cls.__name__}. "
            f"Load it with {type(model).__name__}.from_preset({name!r}) or "
            f"keras_tfm.zoo.from_preset({name!r})."
        )
