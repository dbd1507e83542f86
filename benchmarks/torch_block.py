"""One PyTorch encoder block's forward + backward, for benchmarks/run.py.

    /work/torchenv/bin/python benchmarks/torch_block.py 4096

Runs under any Python with torch (run.py calls it with its --torch-python);
prints one JSON line: the seconds and the peak-RSS growth (MB) of the first,
second and third call. Eager, float32, batch 1, as `nn.TransformerEncoderLayer`
(d_model 256, 4 heads, FFN 1024, no dropout) runs by default.
"""

import json
import os
import sys
import time


def rss(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024  # MB
    return float("nan")


def main(length, hidden_dim=256, num_heads=4, intermediate_dim=1024):
    import torch

    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(0)
    block = torch.nn.TransformerEncoderLayer(
        hidden_dim, num_heads, intermediate_dim, dropout=0.0, batch_first=True
    )
    x = torch.randn(1, length, hidden_dim, requires_grad=True)
    result = {}
    for call in ("first", "second", "third"):
        block.zero_grad()
        x.grad = None
        base = rss("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets the peak (VmHWM) to the current RSS
        start = time.perf_counter()
        y = block(x)
        (y * y).sum().backward()
        result[f"{call}_s"] = time.perf_counter() - start
        result[f"{call}_rss_mb"] = rss("VmHWM") - base
        del y
    result["torch"] = torch.__version__
    print(json.dumps(result))


if __name__ == "__main__":
    main(int(sys.argv[1]))
