"""`keras-tfm serve --replicas N` (Ray Serve) against the one-process server.

For each setting of `--replicas` (0: the server without Ray), starts
`keras-tfm serve MODEL` on a free 127.0.0.1 port, waits for /health, and
sends the same greedy chat requests from `--clients` concurrent clients
(`benchmarks/serve_load.py`'s prompts and client). Prints a Markdown table
(throughput, time to first token, per-token latency, start-up time; with
`--same-slots`, also one process with as many slots as the most replicas
hold together) and
checks that every request was answered exactly once, that each answer
equals the one-process server's, and that the `openai` client, asking the
first prompt again unstreamed, gets the same answer. Bounded: clients x
requests requests of at most `--max-tokens` tokens per setting, loopback
only, every HTTP call with a timeout. Needs the `ray` extra: pip install
'keras-tfm[ray]'.

    python benchmarks/serve_replicas.py --replicas 0 1 2 --same-slots
"""

import argparse
import asyncio
import os
import signal
import time

import openai
from serve_load import add_request_arguments, prompts, run, summary

from keras_tfm.serving.process import free_port, start_server


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_request_arguments(parser)
    parser.add_argument(
        "--replicas", type=int, nargs="+", default=[0, 1, 2],
        help="one run each; 0: the server in one process, without Ray",
    )  # fmt: skip
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument(
        "--same-slots", action="store_true",
        help="add one process with --max-batch times the most replicas",
    )  # fmt: skip
    args = parser.parse_args()
    settings = [(replicas, args.max_batch) for replicas in args.replicas]
    if args.same_slots:
        settings.append((0, args.max_batch * max(args.replicas)))

    contents = prompts(args.clients * args.requests)
    rows, answers, codes = [], [], []
    for replicas, max_batch in settings:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        options = ["--max-batch", max_batch, "--max-context", args.max_context]
        if replicas:
            options += ["--replicas", replicas]
        start = time.perf_counter()
        server = start_server(args.model, port, *options, timeout=900)
        started = time.perf_counter() - start
        try:
            # Warm-up: every replica compiles its prompt-length buckets.
            warm = max(replicas, 1) * max_batch
            asyncio.run(run(url, args.model, contents[:warm], warm, 4))
            results, seconds = asyncio.run(
                run(url, args.model, contents, args.clients, args.max_tokens)
            )
            client = openai.OpenAI(
                base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600
            )
            again = client.chat.completions.create(
                model=args.model, max_tokens=args.max_tokens, temperature=0,
                messages=[{"role": "user", "content": contents[0]}],
            ).choices[0].message.content  # fmt: skip
        finally:
            server.send_signal(signal.SIGTERM)
            codes.append(server.wait(300))
        name = (
            f"{replicas} Ray Serve replica(s) of {max_batch} slots"
            if replicas
            else f"one process of {max_batch} slots, no Ray"
        )
        rows.append(dict(summary(name, results, seconds), started=started))
        answers.append([r["text"] for r in results])
        if not all(r["done"] == 1 for r in results):
            raise SystemExit(f"{name}: a request was not answered exactly once")
        if again != results[0]["text"]:
            raise SystemExit(f"{name}: the openai client got another answer")

    print(f"\nload (1-min average) at the end: {os.getloadavg()[0]:.1f}; "
          f"{os.cpu_count()} cores")  # fmt: skip
    print(
        f"{args.model}, {args.clients} "
        f"concurrent clients, {len(contents)} greedy chat requests of at most "
        f"{args.max_tokens} tokens; exit codes {codes}"
    )
    print("\n| server | start-up | req/s | tokens/s | TTFT p50 | TTFT p95 | "
          "per token p50 | per token p95 |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['name']} | {r['started']:.0f} s | {r['requests_per_s']:.2f} | "
            f"{r['tokens_per_s']:.1f} | {r['ttft_p50']:.2f} s | {r['ttft_p95']:.2f} s "
            f"| {1000 * r['token_p50']:.0f} ms | {1000 * r['token_p95']:.0f} ms |"
        )
    equal = [
        sum(a == b for a, b in zip(answers[0], other, strict=True))
        for other in answers[1:]
    ]
    print(f"\nanswers equal to the first row's: {equal} of {len(contents)} each")
    if any(e != len(contents) for e in equal) or any(codes):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
