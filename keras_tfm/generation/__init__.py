"""Text generation machinery, below the models: settings, processors, loops.

The built-in samplers ("greedy", "random", "top_k", "top_p") run one
XLA-compiled loop (`decode_loop`) whose settings are per-row tensors
(`GenerationConfig` -> `settings_tensors`): a new temperature, top-k,
top-p, min-p, penalty, seed or stop id is a new input, never a new program.
Each step's logits go through the `logit_processors` (repetition, presence
and frequency penalties, n-gram and word bans), then `sampling` (the
warpers and a per-row seeded draw). `BeamSearchSampler` adds a length
penalty, finished beams and per-row prompt masks to beam search; a
`keras_hub.samplers.Sampler` object is still accepted (`make_sampler`).
`sliding_window` holds the window arithmetic for decoding past the context
window; `CompiledLoops` keeps a model's compiled loops.
`SpeculativeDecoder` drafts tokens (prompt lookup or a draft model) that
the model verifies in one pass, and `set_kv_cache_dtype("int8")` stores
the cache in int8.
This package owns decoding: `CausalLM.generate` builds a `request`
(`GenerationRequest`, whose `validate` holds the rules about combinations),
`strategies.strategy_for` picks the strategy that runs it (buffered, beam,
streamed, sliding, speculative), every strategy drives the model's
`cached_steps` through the compiled functions of `loops`, `buffers` sizes
what reaches them, and `outputs` shapes the result like the inputs.
`continuous_batching` is the server's slot decoder and scheduler.

Example:
>>> from keras_tfm.generation import BeamSearchSampler, GenerationConfig
>>> sampler = BeamSearchSampler(num_beams=4, length_penalty=0.6)
>>> GenerationConfig(sampler="top_p", top_p=0.9).row_values()["top_p"]
0.9
"""

import importlib

# Each name is imported from its module on first use (PEP 562), so that the
# Keras-free parts (`generation_config`, `buffers`' Python rules) serve the
# LiteRT chat, which imports no Keras: the other modules import it.
_SOURCES = {
    "BeamSearchSampler": "beam_search_sampler",
    "CompiledLoops": "compiled_loops",
    "invalidate_compiled_loops": "compiled_loops",
    "DecoderSteps": "decoder_steps",
    "SAMPLERS": "generation_config",
    "GenerationConfig": "generation_config",
    "settings_tensors": "generation_config",
    "make_sampler": "keras_hub_samplers",
    "set_kv_cache_dtype": "kv_cache_dtype",
    "SpeculativeDecoder": "strategies.speculative",
}


def __getattr__(name):
    if name in _SOURCES:
        module = importlib.import_module(f"keras_tfm.generation.{_SOURCES[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'keras_tfm.generation' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SOURCES))


__all__ = [
    "BeamSearchSampler",
    "CompiledLoops",
    "DecoderSteps",
    "GenerationConfig",
    "SAMPLERS",
    "SpeculativeDecoder",
    "invalidate_compiled_loops",
    "make_sampler",
    "set_kv_cache_dtype",
    "settings_tensors",
]
