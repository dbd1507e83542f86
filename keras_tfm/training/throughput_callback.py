import time

import keras

from keras_tfm.training.flops import (
    format_mfu,
    measure_peak_flops,
    model_flops_utilization,
)
from keras_tfm.validation import check_positive_float, check_positive_int

_clock = time.perf_counter  # a seam for tests


@keras.saving.register_keras_serializable(package="keras_tfm")
class ThroughputCallback(keras.callbacks.Callback):
    """Reports training tokens per second and model-FLOPs utilisation.

        tokens_per_second = tokens / seconds
        mfu = tokens_per_second * flops_per_token / peak_flops

    At each epoch end it adds `tokens_per_second` and `mfu` to the logs (so
    `History`, Keras' progress bar and later callbacks see them) and prints
    one line; from an epoch's second step on, each step's logs hold the
    running `tokens_per_second`, which Keras' progress bar shows live. An
    MFU above 100% is impossible: it means the peak was underestimated, so
    `mfu` is then NaN and the line says so instead. Tokens are counted in
    one of two ways, chosen by the arguments:

    - `token_count_metric="num_tokens"`: the *real* (non-padding) label
      tokens, read from a `TokenCount` metric passed to `compile(metrics=...)`
      under that name. Use this with padded batches.
    - `tokens_per_step=batch_size * sequence_length`: *all* positions,
      padding included (a short last batch is counted as full).

    Timing runs from the end of an epoch's first step to the end of its last
    step, so tracing/compilation and validation are excluded; an epoch of a
    single step is timed whole.

    Args:
        tokens_per_step: tokens per training step (all positions), or None.
        token_count_metric: the name of a `TokenCount` metric, or None.
            Exactly one of the two must be given.
        flops_per_token: model FLOPs per token, e.g. from
            `training_flops_per_token`; None uses `6 * model.count_params()`
            (no attention term).
        peak_flops: the device's peak FLOP/s (e.g. 312e12 for an A100 in
            bfloat16); None measures it at train begin with
            `measure_peak_flops()` in the model's compute dtype (better:
            measure it before `fit`, when nothing else runs, and pass it).
        verbose: whether to print the epoch line.

    Example:
    >>> model.compile("adam", TokenCrossEntropy(), metrics=[TokenCount()])
    >>> throughput = ThroughputCallback(token_count_metric="num_tokens",
    ...                                 peak_flops=1e12)
    >>> model.fit(x, y, callbacks=[throughput])
    >>> model.history.history["tokens_per_second"]
    """

    def __init__(
        self,
        tokens_per_step=None,
        token_count_metric=None,
        flops_per_token=None,
        peak_flops=None,
        verbose=1,
    ):
        super().__init__()
        if (tokens_per_step is None) == (token_count_metric is None):
            raise ValueError(
                "Pass exactly one of `tokens_per_step` and `token_count_metric`. "
                f"Received: tokens_per_step={tokens_per_step!r}, "
                f"token_count_metric={token_count_metric!r}"
            )
        if tokens_per_step is not None:
            check_positive_int("tokens_per_step", tokens_per_step)
        if token_count_metric is not None and not isinstance(token_count_metric, str):
            raise ValueError(
                "`token_count_metric` must be a metric name. "
                f"Received: token_count_metric={token_count_metric!r}"
            )
        if flops_per_token is not None:
            check_positive_float("flops_per_token", flops_per_token)
        if peak_flops is not None:
            check_positive_float("peak_flops", peak_flops)
        self.tokens_per_step = tokens_per_step
        self.token_count_metric = token_count_metric
        self.flops_per_token = flops_per_token
        self.peak_flops = peak_flops
        self.verbose = verbose
        self._peak = None
        self._flops = None

    def on_train_begin(self, logs=None):
        self._flops = self.flops_per_token
        if self._flops is None:
            self._flops = 6 * self.model.count_params()
        self._peak = self.peak_flops
        if self._peak is None:
            # In the dtype the matmuls run in: bfloat16 is twice as fast as
            # float32 on CPUs with AVX-512 BF16, so a float32 peak would
            # overstate a mixed_bfloat16 model's MFU.
            self._peak = measure_peak_flops(dtype=self.model.dtype_policy.compute_dtype)

    def _tokens(self, step, logs):
        if self.tokens_per_step is not None:
            return (step + 1) * self.tokens_per_step
        if self.token_count_metric not in (logs or {}):
            raise ValueError(
                f"`token_count_metric={self.token_count_metric!r}` is not in the "
                f"training logs, which hold {sorted(logs or {})}. Add a "
                "`keras_tfm.training.TokenCount` metric of that name to compile()."
            )
        return float(logs[self.token_count_metric])

    def on_epoch_begin(self, epoch, logs=None):
        # (time, tokens so far, step) marks: epoch start, first and last step.
        self._start = (_clock(), 0.0, -1)
        self._first = None
        self._last = None

    def on_train_batch_end(self, batch, logs=None):
        mark = (_clock(), self._tokens(batch, logs), batch)
        if self._first is None:
            self._first = mark
        self._last = mark
        if logs is not None and batch > self._first[2]:
            # The running rate, for Keras' progress bar during the epoch.
            seconds = max(mark[0] - self._first[0], 1e-9)
            logs["tokens_per_second"] = (mark[1] - self._first[1]) / seconds

    def on_epoch_end(self, epoch, logs=None):
        if self._last is None:
            return
        begin = self._first if self._last[2] > self._first[2] else self._start
        seconds = max(self._last[0] - begin[0], 1e-9)
        tokens_per_second = (self._last[1] - begin[1]) / seconds
        achieved = tokens_per_second * self._flops
        if logs is not None:
            logs["tokens_per_second"] = tokens_per_second
            logs["mfu"] = model_flops_utilization(achieved, self._peak)
        if self.verbose:
            kind = "real" if self.token_count_metric else "all"
            print(
                f"Epoch {epoch + 1}: {tokens_per_second:,.0f} tokens/s ({kind} "
                f"tokens), {format_mfu(achieved, self._peak)}"
            )

    def get_config(self):
        return {
            "tokens_per_step": self.tokens_per_step,
            "token_count_metric": self.token_count_metric,
            "flops_per_token": self.flops_per_token,
            "peak_flops": self.peak_flops,
            "verbose": self.verbose,
        }
