#!/usr/bin/env python3
"""The PyTorch half of bench/tensor.bench.ts (run it with `npm run bench:tensor`).

It is a small server: bench/tensor.bench.ts spawns it, writes one JSON request per line on stdin, and reads one
JSON reply per line on stdout. The TypeScript side alternates its own measurements with these requests, so both
sides run the same workloads, one at a time, under the same machine load. The workloads here mirror the ones in
tensor.bench.ts line by line; change them together.

Requests (every reply carries "ok"; timings are seconds per call, one entry per sample):
  {"kind": "hello", "threads": 2}                                  -> {"ok": true, "torch": "2.13.0", "threads": 2}
  {"kind": "small", "op": "add", "calls": 2000, "samples": 3}      -> {"ok": true, "s": [...]}
  {"kind": "matmul", "dtype": "float32", "n": 512, "calls": 4, "samples": 1, "warmup": 1}
  {"kind": "block", "config": {...}, "calls": 1, "samples": 1, "warmup": 0}
  {"kind": "exit"}
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

# ---------------------------------------------------------------------------------------------------------------
# small ops: one statement each, compiled into its own loop so that the loop adds no call of its own

SMALL_OPS: dict[str, str] = {
    "add": "a8 + b8",
    "mul_scalar": "a8 * 2.0",
    "view": "a8.view(2, 4)",
    "sum": "a8.sum()",
    "matmul_4x4": "m4 @ m4",
    "softmax_16": "torch.softmax(s16, -1)",
    "zeros_8": "torch.zeros(8)",
}

_small_env: dict[str, Any] = {
    "torch": torch,
    "a8": torch.randn(8),
    "b8": torch.randn(8),
    "m4": torch.randn(4, 4),
    "s16": torch.randn(16),
}
_small_loops: dict[str, Callable[[int], int]] = {}


def small_loop(op: str) -> Callable[[int], int]:
    loop = _small_loops.get(op)
    if loop is None:
        source = (
            "def loop(calls):\n"
            "    t0 = perf_counter_ns()\n"
            "    for _ in range(calls):\n"
            f"        {SMALL_OPS[op]}\n"
            "    return perf_counter_ns() - t0\n"
        )
        scope = dict(_small_env, perf_counter_ns=time.perf_counter_ns)
        exec(compile(source, f"<small op {op}>", "exec"), scope)
        loop = scope["loop"]
        _small_loops[op] = loop
    return loop


def run_small(req: dict[str, Any]) -> list[float]:
    loop = small_loop(req["op"])
    calls = int(req["calls"])
    for _ in range(int(req.get("warmup", 0))):
        loop(calls)
    return [loop(calls) / 1e9 / calls for _ in range(int(req["samples"]))]


# ---------------------------------------------------------------------------------------------------------------
# matmul


_matmul_inputs: dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor]] = {}


def run_matmul(req: dict[str, Any]) -> list[float]:
    key = (req["dtype"], int(req["n"]))
    if key not in _matmul_inputs:
        _matmul_inputs.clear()  # keep one size alive at a time
        n = key[1]
        _matmul_inputs[key] = (torch.randn(n, n).to(DTYPES[key[0]]), torch.randn(n, n).to(DTYPES[key[0]]))
    a, b = _matmul_inputs[key]
    calls = int(req["calls"])
    for _ in range(int(req.get("warmup", 0))):
        a @ b
    out = []
    for _ in range(int(req["samples"])):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            a @ b
        out.append((time.perf_counter_ns() - t0) / 1e9 / calls)
    return out


# ---------------------------------------------------------------------------------------------------------------
# one Llama/Qwen-style decoder block (pre-norm RMSNorm, q/k/v/o projections, rotary embedding, causal GQA
# attention, SwiGLU MLP), forward + backward; mirrors Block in tensor.bench.ts


def filler(seed: int, rows: int, cols: int, scale: float | None = None) -> torch.Tensor:
    """Deterministic values that the TypeScript side reproduces exactly: sin(0.37 i + seed) / sqrt(cols)."""
    values = torch.arange(rows * cols, dtype=torch.float32).mul(0.37).add(seed).sin()
    return values.mul(scale if scale is not None else 1.0 / math.sqrt(cols)).view(rows, cols)


class Block:
    def __init__(self, c: dict[str, Any]) -> None:
        self.c = c
        dt = DTYPES[c["dtype"]]
        hidden, heads, kv_heads, inter = c["hidden"], c["heads"], c["kvHeads"], c["intermediate"]
        self.head_dim = hd = hidden // heads

        def weight(seed: int, rows: int, cols: int) -> torch.Tensor:
            return filler(seed, rows, cols).to(dt).requires_grad_()

        self.wq, self.wk, self.wv = weight(1, hidden, hidden), weight(2, kv_heads * hd, hidden), weight(3, kv_heads * hd, hidden)
        self.wo = weight(4, hidden, hidden)
        self.wg, self.wu, self.wd = weight(5, inter, hidden), weight(6, inter, hidden), weight(7, hidden, inter)
        self.ln1 = torch.ones(hidden, dtype=dt, requires_grad=True)
        self.ln2 = torch.ones(hidden, dtype=dt, requires_grad=True)
        self.params = [self.wq, self.wk, self.wv, self.wo, self.wg, self.wu, self.wd, self.ln1, self.ln2]
        self.x = filler(8, c["batch"] * c["seq"], hidden, scale=1.0).view(c["batch"], c["seq"], hidden).to(dt)
        # rotary tables [seq, head_dim], as in Hugging Face Llama/Qwen2 (theta 1e6)
        inv_freq = 1.0 / (c["ropeTheta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        freqs = torch.outer(torch.arange(c["seq"], dtype=torch.float32), inv_freq)
        emb = torch.cat([freqs, freqs], -1)
        self.cos, self.sin = emb.cos().to(dt), emb.sin().to(dt)

    def rope(self, t: torch.Tensor) -> torch.Tensor:
        half = self.head_dim // 2
        rotated = torch.cat([-t[..., half:], t[..., :half]], -1)
        return t * self.cos + rotated * self.sin

    def step(self) -> float:
        c = self.c
        b, s, hidden, heads, kv, hd = c["batch"], c["seq"], c["hidden"], c["heads"], c["kvHeads"], self.head_dim
        eps = c["eps"]
        for p in self.params:
            p.grad = None
        x = self.x
        h = F.rms_norm(x, (hidden,), self.ln1, eps)
        q = F.linear(h, self.wq).view(b, s, heads, hd).transpose(1, 2)
        k = F.linear(h, self.wk).view(b, s, kv, hd).transpose(1, 2)
        v = F.linear(h, self.wv).view(b, s, kv, hd).transpose(1, 2)
        q, k = self.rope(q), self.rope(k)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + F.linear(a.transpose(1, 2).reshape(b, s, hidden), self.wo)
        h = F.rms_norm(x, (hidden,), self.ln2, eps)
        x = x + F.linear(F.silu(F.linear(h, self.wg)) * F.linear(h, self.wu), self.wd)
        loss = x.float().square().mean()
        loss.backward()
        return loss.item()


_block: tuple[str, Block] | None = None


def run_block(req: dict[str, Any]) -> tuple[list[float], float]:
    global _block
    key = json.dumps(req["config"], sort_keys=True)
    if _block is None or _block[0] != key:
        _block = (key, Block(req["config"]))
    block = _block[1]
    calls = int(req["calls"])
    loss = math.nan
    for _ in range(int(req.get("warmup", 0))):
        loss = block.step()
    out = []
    for _ in range(int(req["samples"])):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            loss = block.step()
        out.append((time.perf_counter_ns() - t0) / 1e9 / calls)
    return out, loss


# ---------------------------------------------------------------------------------------------------------------


def handle(req: dict[str, Any]) -> dict[str, Any]:
    kind = req["kind"]
    if kind == "hello":
        torch.set_num_threads(int(req["threads"]))
        return {"ok": True, "torch": torch.__version__, "threads": torch.get_num_threads(), "python": sys.version.split()[0]}
    if kind == "small":
        return {"ok": True, "s": run_small(req)}
    if kind == "matmul":
        return {"ok": True, "s": run_matmul(req)}
    if kind == "block":
        times, loss = run_block(req)
        return {"ok": True, "s": times, "loss": loss}
    raise ValueError(f"unknown request kind {kind!r}")


def main() -> None:
    torch.manual_seed(0)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("kind") == "exit":
            break
        try:
            reply = handle(req)
        except Exception as error:  # reported to the TypeScript side, which fails loudly
            reply = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
