"""The server as a Ray Serve deployment: N replicas behind one endpoint.

Each replica is a process of its own that loads the model and runs the
same Starlette application as `keras-tfm serve` (`build_app`: routes,
continuous batching, prefix cache, key, metrics); Ray Serve's HTTP proxy
takes the requests on one address and sends each to a replica with free
room (at most `max_batch` requests in flight per replica; the rest wait at
the proxy). Ray Serve rather than a load balancer of our own: it starts,
restarts and scales the replica processes on one machine or a cluster.

`keras-tfm serve MODEL --replicas N` runs it on this machine; from Python,
with a function that loads the model in each replica:

>>> from ray import serve  # doctest: +SKIP
>>> from keras_tfm import zoo
>>> from keras_tfm.serving.replicas import deployment  # doctest: +SKIP
>>> app = deployment(lambda: zoo.from_preset("kjv_gpt"), "kjv_gpt")  # doctest: +SKIP
>>> serve.run(app, route_prefix="/")  # doctest: +SKIP

`/metrics` answers with the figures of the replica the request reached;
Ray Serve's own metrics (its port 8080 by default) cover all of them.
"""

import os
import time

from keras_tfm.serving import defaults

try:
    from ray import serve
except ImportError as error:
    raise ImportError(
        f"keras-tfm's Ray Serve replicas need the `ray` extra ({error.name} is "
        "missing): pip install 'keras-tfm[ray]'"
    ) from None


@serve.ingress()
class Replica:
    """One replica: the model loaded in this process, served by `build_app`.

    Args:
        load_model: a function of no arguments that returns the model.
        model_id: the name clients pass as `model`.
        threads: TensorFlow's threads inside one operation (intra-op) in
            this replica, so that replicas sharing a machine do not each
            start one thread per core; None: TensorFlow's default.
        **options: `Service`'s (`max_batch`, `max_length`, ...).
    """

    def __init__(self, load_model, model_id, threads=None, **options):
        if threads is not None:
            import tensorflow as tf

            tf.config.threading.set_intra_op_parallelism_threads(threads)
        from keras_tfm.serving.app import Service

        self.service = Service(load_model(), model_id, **options)

    def __serve_build_asgi_app__(self):
        from keras_tfm.serving.app import build_app

        return build_app(self.service)


def deployment(
    load_model, model_id, replicas=2, cpus_per_replica=1,
    max_batch=defaults.MAX_BATCH, max_length=None,
    steps_per_call=defaults.STEPS_PER_CALL,
    max_body_bytes=defaults.MAX_BODY_BYTES, api_key=None,
    prefix_cache_mb=defaults.PREFIX_CACHE_MB, prefill_chunk=defaults.PREFILL_CHUNK,
):  # fmt: skip
    """The Ray Serve application of `replicas` copies of the server.

    Args:
        load_model: a function of no arguments that returns the model,
            called in each replica (pickled with cloudpickle: a lambda or
            a module's function; a file it reads must exist where the
            replicas run).
        model_id: the name clients pass as `model`.
        replicas: how many processes serve the model.
        cpus_per_replica: the cores Ray reserves for each replica (a
            fraction packs several on a core); its TensorFlow intra-op
            threads are that many, at least one.
        max_batch, max_length, steps_per_call, max_body_bytes,
            api_key, prefix_cache_mb, prefill_chunk: as `keras-tfm
            serve`'s options.

    Returns:
        A bound `ray.serve.Application`, for `serve.run`.
    """
    if not isinstance(replicas, int) or replicas < 1:
        raise ValueError(
            f"`replicas` must be a positive integer. Received: {replicas!r}"
        )
    if isinstance(cpus_per_replica, bool) or not (
        isinstance(cpus_per_replica, (int, float)) and cpus_per_replica > 0
    ):
        raise ValueError(
            "`cpus_per_replica` must be a number > 0. Received: "
            f"cpus_per_replica={cpus_per_replica!r}"
        )
    options = dict(
        max_batch=max_batch, max_length=max_length, steps_per_call=steps_per_call,
        max_body_bytes=max_body_bytes, api_key=api_key, prefix_cache_mb=prefix_cache_mb,
        prefill_chunk=prefill_chunk,
    )  # fmt: skip
    return serve.deployment(
        Replica,
        name="keras-tfm",
        num_replicas=replicas,
        max_ongoing_requests=max_batch,
        ray_actor_options={"num_cpus": cpus_per_replica},
        # Loading a model and compiling its first calls takes minutes on a
        # small machine; a replica is healthy once its app has started.
        health_check_timeout_s=600,
        graceful_shutdown_timeout_s=120,
    ).bind(load_model, model_id, max(1, int(cpus_per_replica)), **options)


def serve_replicas(
    load_model, model_id, host=defaults.HOST, port=defaults.PORT, replicas=2,
    **options,
):  # fmt: skip
    """Starts Ray on this machine, serves `deployment(load_model, model_id,
    replicas, **options)` on `host:port` until SIGTERM or Ctrl-C, then
    stops the replicas and Ray."""
    import ray

    cpus = options.get("cpus_per_replica", 1) * replicas
    if cpus > (os.cpu_count() or 1):
        raise ValueError(
            f"{replicas} replicas of {options.get('cpus_per_replica', 1)} core(s) "
            f"need {cpus} cores; this machine has {os.cpu_count()}."
        )
    ray.init(include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": host, "port": port})
        app = deployment(load_model, model_id, replicas=replicas, **options)
        serve.run(app, route_prefix="/")
        print(f"keras-tfm serve: {replicas} replicas on http://{host}:{port}")
        _wait_for_signal()
    finally:
        serve.shutdown()
        ray.shutdown()


def _wait_for_signal():
    import signal

    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    while not stop:
        time.sleep(0.2)
