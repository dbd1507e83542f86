from pathlib import Path

import keras
import numpy as np
import pytest

from tests.examples import load_example_module

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "finetune_smollm2_lora.py"


def load_example():
    return load_example_module("finetune_smollm2_lora")


def lora_parameters(model, rank):
    """rank * (in + out) per adapted kernel, from the model's dimensions."""
    hidden, inter = model.hidden_dim, model.intermediate_dim
    head_dim = model.head_dim or hidden // model.num_heads
    kv_width = 2 * (model.num_key_value_heads or model.num_heads) * head_dim
    per_block = [
        (hidden, model.num_heads * head_dim),  # query
        (hidden, kv_width),  # key_value: keys and values
        (model.num_heads * head_dim, hidden),  # attention_output
        (hidden, 2 * inter),  # intermediate: SwiGLU's gate and up
        (inter, hidden),  # output
    ]
    return model.num_layers * sum(rank * (i + o) for i, o in per_block)


@pytest.mark.slow
def test_quick_run_trains_only_the_adapters_and_moves_the_held_out_loss(
    smollm2, capsys
):
    from keras_tfm.datasets.fortunes import fortune_definitions

    try:
        fortune_definitions()
    except ValueError as error:
        pytest.skip(str(error))
    pretrained = {w.path: keras.ops.convert_to_numpy(w) for w in smollm2.weights}
    result = load_example().main(["--quick"], base_model=smollm2)
    out = capsys.readouterr().out
    model, rank = result["model"], result["config"]["lora_rank"]

    # Only the LoRA factors train: 2 per projection, 5 projections a block.
    names = [w.path for w in model.trainable_weights]
    assert len(names) == 2 * 5 * smollm2.num_layers
    assert all(n.endswith(("/lora_kernel_a", "/lora_kernel_b")) for n in names)
    expected = lora_parameters(smollm2, rank)
    assert result["trainable_parameters"] == expected == 2_165_760
    assert f"{expected:,} trainable parameters" in out

    # Every pretrained weight is bit-identical after training.
    frozen = {w.path: w for w in model.non_trainable_weights}
    assert set(frozen) == set(pretrained)
    for path, value in pretrained.items():
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(frozen[path]), value)
    # ... including the shared fixture, which the example copies, not adapts.
    layers = smollm2._flatten_layers(include_self=False, recursive=True)
    assert not any(getattr(layer, "lora_enabled", False) for layer in layers)

    # The held-out loss printed before training is the pretrained model's
    # mean cross-entropy over the answers' tokens, computed here from the
    # template's text: the tokens after "<|im_start|>assistant\n" up to and
    # including "<|im_end|>".
    tokenizer = smollm2.tokenizer
    opening = [int(i) for i in tokenizer("<|im_start|>assistant\n")]
    losses = []
    for prompt, answer in result["heldout"]:
        messages = [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": answer},
        ]
        ids = np.asarray(tokenizer(tokenizer.apply_chat_template(messages, False)))
        first = next(
            i + len(opening)
            for i in range(len(ids))
            if list(ids[i : i + len(opening)]) == opening
        )
        last = list(ids).index(tokenizer.end_token_id, first)
        logits = np.asarray(smollm2(ids[None, :-1]), "float64")[0]
        logits -= logits.max(-1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        losses += [-logp[t - 1, ids[t]] for t in range(first, last + 1)]
    before, after = result["heldout_before"], result["heldout_after"]
    np.testing.assert_allclose(before, np.mean(losses), rtol=1e-4)
    assert f"held-out loss before: {before:.4f}" in out

    # A few steps move it (by how much is not the test's business).
    assert np.isfinite(after)
    assert abs(after - before) > 1e-3
