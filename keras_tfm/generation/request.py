"""One call of `generate`: the settings of each row and the call's options.

`GenerationRequest.build` turns `generate`'s arguments into a request
(checked one by one, in the order `generate` always checked them) and
`validate` holds the rules about their combinations: which modes give
scores, stop strings, streaming or a sliding window. `strategy_for` then
picks the strategy that runs it (`keras_tfm.generation.strategies`).
Hugging Face's `GenerationConfig.validate` plus `generation_mode` is the
model; here the per-row settings stay a `GenerationConfig` per row.

Example:
>>> from keras_tfm.generation import GenerationConfig
>>> request = GenerationRequest([GenerationConfig()], max_new_tokens=4,
...                             stream=True, return_scores=True)
>>> request.validate()
Traceback (most recent call last):
...
ValueError: `return_scores` is given by the built-in samplers' loop over one buffer: not with beam search, a sampler object, streaming or a sliding window. Received: return_scores with sampler=None, stream=True, sliding window=False
"""  # noqa: E501

import dataclasses
import inspect

from keras_tfm.generation import grammar, scoring, sliding_window, token_inputs
from keras_tfm.generation.generation_config import configs_for, request_base
from keras_tfm.validation import check_positive_int

SETTINGS = (
    "sampler", "temperature", "top_k", "top_p", "num_beams", "stop_token_ids",
    "seed", "length_penalty", "window_shift", "min_p", "repetition_penalty",
    "presence_penalty", "frequency_penalty", "no_repeat_ngram_size",
    "bad_words_ids", "stop_strings", "return_scores", "top_logprobs", "draft",
    "response_format",
)  # fmt: skip
"""The keyword settings `generate` takes besides `max_new_tokens`,
`generation_config` and `stream`."""

_ROW_SETTINGS = (
    "temperature", "top_k", "top_p", "num_beams", "seed", "length_penalty",
    "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
    "no_repeat_ngram_size", "bad_words_ids", "stop_strings",
)  # fmt: skip


def lists_settings(generate):
    """Decorator: `generate`'s signature (what `inspect` reads, e.g. the
    command line's flag check) lists each of `SETTINGS` as a keyword-only
    parameter in place of `**settings`."""
    signature = inspect.signature(generate)
    parameters = [
        p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD
    ]
    parameters += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                          default=False if name == "return_scores" else None)
        for name in SETTINGS
    ]  # fmt: skip
    generate.__signature__ = signature.replace(parameters=parameters)
    return generate


def check_setting_names(settings, where="generate"):
    """TypeError (Python's own, for a misspelt keyword) for any name of
    `settings` that is not one of `SETTINGS`."""
    for name in settings:
        if name not in SETTINGS:
            raise TypeError(f"{where}() got an unexpected keyword argument {name!r}")


@dataclasses.dataclass
class GenerationRequest:
    """What one `generate` call asks for.

    Attributes:
        configs: one `GenerationConfig` per row (the model's defaults under
            the call's settings).
        max_new_tokens: how many tokens to add at most.
        sampler: the `sampler` argument as given (a name, a
            `keras_hub.samplers.Sampler`, or None), for the messages.
        instance: the `keras_hub.samplers.Sampler` object, else None.
        stream: whether pieces are yielded as they come.
        return_scores: whether each new token's log-probability is returned.
        top_logprobs: how many alternatives per new token (0: none).
        draft: the speculative decoding draft, or None.
        stop_token_ids: a tuple of ids, or None.
        window_shift: how far the window slides when it is full.
        slides: whether a prompt plus `max_new_tokens` exceeds the window.
        decoder_only: whether the model is decoder-only
            (`CausalLM.is_decoder_only`): speculative decoding needs it.
        model_name: the model's class name, and
        max_sequence_length: its window, for the messages.
        regex: the regex structured output holds the new text to
            (`grammar.response_format_regex` of `response_format`), or None.
    """

    configs: list
    max_new_tokens: int
    sampler: object = None
    instance: object = None
    stream: bool = False
    return_scores: bool = False
    top_logprobs: int = 0
    draft: object = None
    stop_token_ids: tuple = None
    window_shift: int = None
    slides: bool = False
    decoder_only: bool = True
    model_name: str = "CausalLM"
    max_sequence_length: int = None
    regex: str = None

    @property
    def beam(self):
        """Whether the request is beam search (by name or `num_beams` > 1)."""
        return self.instance is None and self.configs[0].sampler == "beam"

    @property
    def stop_strings(self):
        """Each row's stop strings (a list of tuples)."""
        return [config.stop_strings for config in self.configs]

    @property
    def tensor_loop(self):
        """Whether the built-in samplers' loop (settings as tensors) runs it,
        rather than beam search's or a sampler object's own loop."""
        return self.instance is None and not self.beam

    @classmethod
    def build(cls, model, rows, max_new_tokens, generation_config=None,
              stream=False, **settings):  # fmt: skip
        """The checked request of `generate(inputs, max_new_tokens, ...)`.

        Args:
            model: the `CausalLM` (or `Seq2SeqLM`) that generates.
            rows: the checked input rows (`normalize_token_batch`).
            max_new_tokens, generation_config, stream, **settings: as
                `generate` takes them (`SETTINGS`).

        Returns:
            A `GenerationRequest`, validated.
        """
        check_setting_names(settings)
        backbone = model.backbone
        get = settings.get
        check_positive_int("max_new_tokens", max_new_tokens)
        return_scores = get("return_scores", False)
        top_logprobs = scoring.check_top_logprobs(
            get("top_logprobs"), return_scores, backbone.vocabulary_size
        )
        slides = model.check_generation_length(rows, max_new_tokens)
        window_shift = sliding_window.check_window_shift(
            get("window_shift"), backbone.max_sequence_length
        )
        sampler, draft = get("sampler"), get("draft")
        if generation_config is None:
            generation_config = request_base(
                model.generation_config, sampler, get("num_beams"), draft
            )
        row_settings = {name: get(name) for name in _ROW_SETTINGS}
        configs, instance = configs_for(
            sampler, row_settings, generation_config, len(rows)
        )
        stop_token_ids = get("stop_token_ids")
        if stop_token_ids is None:
            stop_token_ids = model.default_stop_token_ids()
        stop_token_ids = token_inputs.check_stop_token_ids(
            stop_token_ids, backbone.vocabulary_size
        )
        regex = grammar.response_format_regex(get("response_format"))
        if regex is not None and model.preprocessor is None:
            raise ValueError(
                "`response_format` needs the model's tokenizer to read the "
                "tokens' text: build the model with a preprocessor. Received: "
                f"response_format={get('response_format')!r:.80}"
            )
        request = cls(
            configs, max_new_tokens, sampler, instance, stream, return_scores,
            top_logprobs, draft, stop_token_ids, window_shift, slides,
            model.is_decoder_only, type(model).__name__, backbone.max_sequence_length,
            regex,
        )  # fmt: skip
        request.validate()
        return request

    def validate(self):
        """Refuses the combinations no strategy runs (ValueError)."""
        beam, stream, slides = self.beam, self.stream, self.slides
        sampler, sampler_object = self.sampler, self.instance is not None
        if beam and (stream or slides):
            raise ValueError(
                "Beam search runs as one compiled loop: it cannot stream or "
                f"slide the window. Received: stream={stream}, a prompt plus "
                f"max_new_tokens={self.max_new_tokens} past max_sequence_length="
                f"{self.max_sequence_length}"
            )
        if self.return_scores and (sampler_object or beam or stream or slides):
            raise ValueError(
                "`return_scores` is given by the built-in samplers' loop over "
                "one buffer: not with beam search, a sampler object, streaming "
                "or a sliding window. Received: return_scores with sampler="
                f"{sampler!r}, stream={stream}, sliding window={slides}"
            )
        if any(self.stop_strings) and (
            sampler_object or beam or (slides and not stream)
        ):
            raise ValueError(
                "`stop_strings` are checked by the built-in samplers' loop (or, "
                "streaming, on the host): not with beam search or a sampler "
                "object, and past the context window only with stream=True. "
                f"Received: stop_strings with sampler={sampler!r}, "
                f"stream={stream}, sliding window={slides}"
            )
        if self.draft is not None:
            plain_greedy = not sampler_object and all(
                c.sampler == "greedy" and not c.uses_processors and not c.stop_strings
                for c in self.configs
            )
            if not (plain_greedy and self.decoder_only) or stream or self.return_scores:
                raise ValueError(
                    "Speculative decoding (`draft`) reproduces plain greedy "
                    "decoding of a decoder-only model: no sampler settings, "
                    "processors, stop strings, streaming or scores. Received: "
                    f"draft={self.draft!r} with sampler={sampler!r}, "
                    f"stream={stream}, return_scores={self.return_scores}, "
                    f"model {self.model_name}"
                )
        if self.regex is not None:
            if (
                not self.tensor_loop or stream or slides or self.draft is not None
                or not self.decoder_only
            ):  # fmt: skip
                raise ValueError(
                    "`response_format` masks the built-in samplers' loop over "
                    "one buffer of a decoder-only model: not with beam search, "
                    "a sampler object, streaming, a draft, a sliding window or "
                    "a sequence-to-sequence model. Received: response_format "
                    f"with sampler={sampler!r}, stream={stream}, draft="
                    f"{self.draft!r}, sliding window={slides}, model "
                    f"{self.model_name}"
                )
            if self.return_scores or not self.stop_token_ids:
                raise ValueError(
                    "`response_format` ends each row with a stop token, "
                    "allowed once the text is complete, and gives no scores "
                    "(they would be those of the masked distribution). "
                    f"Received: return_scores={self.return_scores}, "
                    f"stop_token_ids={self.stop_token_ids!r}"
                )
