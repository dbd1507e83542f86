"""Speculative decoding: greedy output, several tokens per forward pass.

Each round guesses the next k tokens cheaply, then the target model checks
all of them in one cached forward pass over k + 1 tokens (the last accepted
token and the k guesses):

    drafts      d_1 ... d_k                      (the proposer's guesses)
    predictions g_1 ... g_{k+1} = argmax of the target's logits
    accepted    a = the longest prefix with d_i = g_i
    new tokens  g_1 ... g_{a+1}                  (a drafts, then the target's own)

Every new token is the target's greedy choice given the tokens before it,
so the output is greedy decoding's; a round adds between 1 and k + 1
tokens for one pass of the target, which on a CPU costs about as much as a
one-token step (reading the weights dominates). Rejected guesses leave
keys in the cache past the accepted position: the next round writes over
them before any query reads them (rolling the cache back is moving the
index).

Two proposers:
- prompt lookup (Saxena, 2023): copy the tokens that followed the latest
  earlier occurrence of the last `ngram_size` tokens (trying shorter n-grams
  down to one token). No second model; it wins where the output repeats its
  input (editing, summarising, extracting, code). Where nothing matches,
  the round is one plain greedy step (no k + 1 pass for guesses it lacks).
- a draft model sharing the tokenizer, decoding greedily with its own cache:
  another `CausalLM`, or `DecoderSteps(model, num_layers=...)`, the target's
  own first blocks and head (no extra weights).

The whole loop (prefill, drafting, verification, acceptance) is one
XLA-compiled `while` loop per buffer length, one row at a time.

As a strategy (`run`), the request's `draft` (prompt lookup's settings, a
smaller model, `DecoderSteps` or a `SpeculativeDecoder`) proposes the
tokens. Decoder-only models only.

Reference: Leviathan et al., 2023 (speculative decoding); Saxena, 2023
(prompt lookup decoding).
"""

from keras import ops

from keras_tfm.generation import backend, buffers, token_inputs
from keras_tfm.generation.decoder_steps import DecoderSteps
from keras_tfm.generation.outputs import truncate_at_stop
from keras_tfm.validation import check_positive_int

BUFFER_BUCKET = 64
"""Token buffers are rounded up to a multiple of this (one compile each)."""


def lookup_drafts(tokens, length, num_draft_tokens, ngram_size):
    """Prompt-lookup guesses: what followed the last n-gram's latest match.

    For n = `ngram_size` down to 1, the latest start p < length - n with
    `tokens[p : p + n] == tokens[length - n : length]` gives the guesses
    `tokens[p + n :]`, continued periodically past `length` (a repeating
    pattern repeats); with no match at all, the last token repeated (and
    `found` is False).

    Args:
        tokens: int (1, buffer), the first `length` entries valid.
        length: scalar int tensor.
        num_draft_tokens, ngram_size: Python ints.

    Returns:
        `(drafts, found)`: int32 (num_draft_tokens,) and a scalar bool.

    Example:
    >>> tokens = np.array([[7, 8, 9, 4, 7, 8, 0, 0]], "int32")
    >>> drafts, found = lookup_drafts(tokens, 6, 3, 2)
    >>> ops.convert_to_numpy(drafts).tolist(), bool(found)
    ([9, 4, 7], True)
    """
    row = ops.cast(tokens[0], "int32")
    size = row.shape[0]
    positions = ops.arange(size, dtype="int32")
    length = ops.cast(length, "int32")
    start = ops.convert_to_tensor(-1, "int32")
    for n in range(ngram_size, 0, -1):
        match = positions + n < length  # a continuation exists before `length`
        for i in range(n):
            last = ops.take(row, ops.maximum(length - n + i, 0))
            match = ops.logical_and(
                match, ops.take(row, ops.minimum(positions + i, size - 1)) == last
            )
        latest = ops.max(ops.where(match, positions, -1))
        start = ops.where(start >= 0, start, ops.where(latest >= 0, latest + n, -1))
    found = start >= 0
    start = ops.where(found, start, length - 1)
    period = length - start
    steps = ops.arange(num_draft_tokens, dtype="int32")
    return ops.take(row, start + steps % period), found


class SpeculativeDecoder:
    """Greedy decoding of `model`, verified k guessed tokens at a time.

    `model.generate(inputs, max_new_tokens, draft=decoder)` returns
    exactly what `model.generate(inputs, max_new_tokens)` returns with the
    greedy sampler (see the module docstring for how), usually in fewer forward
    passes of `model`. `decoder.stats` tells how the last call went:
    `rounds` (forward passes of `model` after the prefill), `drafted` and
    `accepted` guesses, `acceptance_rate` (accepted / drafted) and
    `new_tokens`.

    Args:
        model: the target, a decoder-only `keras_tfm.models.CausalLM`.
        draft: "prompt_lookup" (default: guesses copied from the prompt and
            the output so far), a smaller `CausalLM` sharing `model`'s
            tokenizer, or a `DecoderSteps` (e.g. `DecoderSteps(model,
            num_layers=8)`, the target's first 8 blocks and its head).
        num_draft_tokens: k, the guesses per round.
        ngram_size: the longest n-gram prompt lookup matches.
        jit_compile: compile the loop with XLA (default; False traces a
            plain `tf.function` on TensorFlow, quicker to build for tiny
            models).

    Example:
    >>> backbone = keras_tfm.models.DecoderBackbone(
    ...     vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=64)
    >>> llm = keras_tfm.models.CausalLM(backbone)
    >>> decoder = SpeculativeDecoder(llm, num_draft_tokens=3)
    >>> prompt = [5, 6, 7, 8, 5, 6]
    >>> out = llm.generate(prompt, 8, draft=decoder)
    >>> out == llm.generate(prompt, 8)
    True
    >>> sorted(decoder.stats)
    ['acceptance_rate', 'accepted', 'drafted', 'new_tokens', 'rounds']

    Reference: Leviathan et al., 2023; Saxena, 2023 (prompt lookup).
    """

    def __init__(
        self,
        model,
        draft="prompt_lookup",
        num_draft_tokens=4,
        ngram_size=3,
        jit_compile=True,
    ):
        self.model = model
        self.target = DecoderSteps(model)
        if isinstance(draft, str):
            if draft != "prompt_lookup":
                raise ValueError(
                    '`draft` must be "prompt_lookup", a `CausalLM` or a '
                    f"`DecoderSteps`. Received: draft={draft!r}"
                )
            self.draft = None
        elif isinstance(draft, DecoderSteps):
            self.draft = draft
        else:
            self.draft = DecoderSteps(draft)
        if self.draft is not None:
            vocabulary = self.draft.backbone.vocabulary_size
            if vocabulary != model.backbone.vocabulary_size:
                raise ValueError(
                    "The draft model must share the target's tokenizer: its "
                    f"vocabulary_size is {vocabulary}, the target's "
                    f"{model.backbone.vocabulary_size}. Received: draft={draft!r}"
                )
        self.num_draft_tokens = check_positive_int("num_draft_tokens", num_draft_tokens)
        self.ngram_size = check_positive_int("ngram_size", ngram_size)
        self.jit_compile = bool(jit_compile)
        self.stats = {}

    def decode(self, rows, max_new_tokens, stop_token_ids=None):
        """Greedy continuations of token-id `rows`: `model.generate(inputs,
        max_new_tokens, draft=self)` calls it after checking its inputs.

        Args:
            rows: lists of token ids (the prompts, checked).
            max_new_tokens: how many tokens to add at most.
            stop_token_ids: a tuple of ids that end a row, or None.

        Returns:
            Per row, the prompt followed by its new tokens (ending with the
            stop id when one was produced): what greedy `generate` returns.
        """
        model = self.model
        backbone = model.backbone
        k = self.num_draft_tokens
        longest = max(len(row) for row in rows) + max_new_tokens + k
        if longest > backbone.max_sequence_length:
            raise ValueError(
                "Speculative decoding needs the prompt, max_new_tokens and "
                f"num_draft_tokens={k} to fit in max_sequence_length="
                f"{backbone.max_sequence_length} (it does not slide the window). "
                f"Received: a prompt of {longest - max_new_tokens - k} tokens and "
                f"max_new_tokens={max_new_tokens}"
            )
        key = (self.draft, k, self.ngram_size, stop_token_ids, self.jit_compile)
        owners = (model,) if self.draft is None else (model, self.draft.model)
        function = model.compiled_loops.get(
            ("speculative", *key),
            lambda: backend.compile_loop(
                self._loop(stop_token_ids), owners, self.jit_compile
            ),
        )
        totals = dict.fromkeys(("rounds", "guessed", "accepted", "new_tokens"), 0)
        results = []
        for row in rows:
            end = len(row) + max_new_tokens
            length = buffers.rounded_length(
                end + k, backbone.max_sequence_length, BUFFER_BUCKET
            )
            tokens, _ = token_inputs.pad_rows([row], length, model.fill_id)
            tokens, index, counts = function(
                tokens, ops.convert_to_tensor(len(row), "int32"),
                ops.convert_to_tensor(end, "int32"),
            )  # fmt: skip
            tokens = ops.convert_to_numpy(tokens)[0, : min(int(index), end)]
            result = truncate_at_stop(tokens, len(row), stop_token_ids)
            results.append(result)
            for name, count in zip(
                ("rounds", "guessed", "accepted"), counts, strict=True
            ):
                totals[name] += int(count)
            totals["new_tokens"] += len(result) - len(row)
        drafted = totals.pop("guessed") * k
        self.stats = dict(
            totals,
            drafted=drafted,
            acceptance_rate=totals["accepted"] / drafted if drafted else 0.0,
        )
        return results

    def _propose(self, tokens, length, caches, valid):
        """`(drafts, found, caches)`: k guesses for positions `length ...`,
        and whether there are any (prompt lookup may find none)."""
        k = self.num_draft_tokens
        if self.draft is None:
            drafts, found = lookup_drafts(tokens, length, k, self.ngram_size)
            return drafts, found, caches
        draft = self.draft

        # Feed positions valid ... length + k - 2 one by one: the draft's
        # cache catches up on the tokens accepted last round, then guesses.
        def body(buffer, caches, position):
            token = ops.take(buffer, ops.reshape(position, [1]), axis=1)
            logits, caches = draft(
                token, caches, position, draft.padding_mask_of(buffer)
            )
            guess = ops.cast(ops.argmax(logits[0, 0]), buffer.dtype)
            kept = ops.take(buffer[0], position + 1)
            guess = ops.where(position + 1 >= length, guess, kept)
            buffer = ops.slice_update(
                buffer, [0, position + 1], ops.reshape(guess, (1, 1))
            )
            return buffer, caches, position + 1

        buffer, caches, _ = ops.while_loop(
            lambda buffer, caches, position: position < length + k - 1,
            body,
            (tokens, caches, valid),
        )
        drafts = ops.take(buffer[0], length + ops.arange(k, dtype="int32"))
        return drafts, ops.convert_to_tensor(True), caches

    def _loop(self, stop_token_ids):
        """The compiled loop: `(tokens, index, (rounds, guessed, accepted))`."""
        target, draft, k = self.target, self.draft, self.num_draft_tokens
        stops = ops.convert_to_tensor(list(stop_token_ids or [-1]), "int32")

        def loop(tokens, prompt_length, end):
            size = tokens.shape[1]
            caches = target.extend(
                tokens, target.empty_cache(1, size), 0, prompt_length - 1
            )
            draft_caches = ()
            if draft is not None:
                draft_caches = draft.extend(
                    tokens, draft.empty_cache(1, size), 0, prompt_length - 1
                )

            def check(tokens, caches, length, guesses):
                """The target's greedy tokens for `length ...` (k + 1 of
                them, padded with zeros past `guesses`' length + 1)."""
                width = guesses.shape[0] + 1
                proposed = ops.slice_update(tokens, [0, length], guesses[None])
                chunk = ops.take(
                    proposed, length - 1 + ops.arange(width, dtype="int32"), axis=1
                )
                logits, caches = target(
                    chunk, caches, length - 1, target.padding_mask_of(proposed)
                )
                # The greedy sampler's choice: argmax of the probabilities.
                predictions = ops.cast(
                    ops.argmax(ops.softmax(logits[0], axis=-1), axis=-1), tokens.dtype
                )
                return ops.pad(predictions, [(0, k + 1 - width)]), caches

            def body(tokens, caches, draft_caches, length, valid, *counts):
                rounds, guessed, accepted, _ = counts
                drafts, found, draft_caches = self._propose(
                    tokens, length, draft_caches, valid
                )
                drafts = ops.cast(drafts, tokens.dtype)
                # Without guesses (no n-gram matched), one plain greedy step.
                predictions, caches = ops.cond(
                    found,
                    lambda: check(tokens, caches, length, drafts),
                    lambda: check(tokens, caches, length, drafts[:0]),
                )  # (k + 1,)
                agree = ops.cast(ops.equal(drafts, predictions[:k]), "int32")
                count = ops.sum(ops.cumprod(agree)) * ops.cast(found, "int32")  # a
                tokens = ops.slice_update(tokens, [0, length], predictions[None])
                new = ops.arange(k + 1, dtype="int32") <= count
                is_stop = ops.any(
                    ops.equal(ops.cast(predictions, "int32")[:, None], stops[None]),
                    axis=1,
                )
                done = ops.any(ops.logical_and(new, is_stop))
                return (
                    tokens, caches, draft_caches, length + count + 1,
                    length + ops.minimum(count, k - 1), rounds + 1,
                    guessed + ops.cast(found, "int32"), accepted + count, done,
                )  # fmt: skip

            zero = ops.convert_to_tensor(0, "int32")
            state = (
                tokens, caches, draft_caches, prompt_length, prompt_length - 1,
                zero, zero, zero, ops.convert_to_tensor(False),
            )  # fmt: skip
            state = ops.while_loop(
                lambda *s: ops.logical_and(ops.logical_not(s[-1]), s[3] < end),
                body,
                state,
            )
            return state[0], state[3], state[5:8]

        return loop


def run(model, request, inputs):
    """`(rows, None, None)`, greedy decoding's rows."""
    draft = request.draft
    if not isinstance(draft, SpeculativeDecoder):
        draft = model.compiled_loops.get(
            ("speculative decoder", draft),
            lambda: SpeculativeDecoder(model, draft),
        )
    rows = draft.decode(inputs.rows, request.max_new_tokens, request.stop_token_ids)
    return rows, None, None
