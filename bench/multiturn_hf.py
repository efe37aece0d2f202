#!/usr/bin/env python3
"""The Hugging Face transformers half of bench/multiturn.bench.ts: the same agent episodes with `generate`, the
whole history resent every turn (no cache kept between turns, as a transformers agent loop runs).

multiturn.bench.ts spawns it and sends one JSON request per stdin line; one JSON reply per stdout line:
  {"kind": "hello", "threads": 2}                    -> {"ok": true, "torch": ..., "transformers": ..., "threads": N}
  {"kind": "run", "dir": "...", "episodes": [[{"observation": [ids...], "reply": n}, ...], ...]}
      -> {"ok": true, "s": [seconds], "cpu_s": CPU seconds of the process, "prefill_tokens": ...,
          "prefill_positions": ..., "generated_positions": ...,
          "peak_kv_positions": ..., "final_lengths": [...]}
  {"kind": "exit"}

A run: turn t of every episode goes in one batch (the episodes run in parallel, as on the engine):
  prompt(e, t) = prompt(e, t - 1) + reply(e, t - 1) + observation(e, t)         left-padded to the turn's longest
  model.generate(max_new_tokens = min_new_tokens = the turn's longest reply, greedy, use_cache=True)
and episode e keeps its first reply(e, t) new tokens (the rest of a shorter reply's row is computed and dropped).
Counted: prefill_tokens, the real prompt tokens of every turn (what the turn's prefill computes besides pads);
prefill_positions, the padded positions the prefill computes (batch x the longest prompt); generated_positions, the
decode positions (batch x max_new_tokens); peak_kv_positions, the largest cache generate builds (batch x (longest
prompt + max_new_tokens)), all positions per layer as the engine's figures are. Float32, sdpa attention, on the CPU.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import torch


def hello(req: dict[str, Any]) -> dict[str, Any]:
    import transformers

    torch.set_num_threads(int(req["threads"]))
    return {"ok": True, "torch": torch.__version__, "transformers": transformers.__version__, "threads": torch.get_num_threads()}


def run(req: dict[str, Any]) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(req["dir"], dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    episodes = req["episodes"]
    histories: list[list[int]] = [[] for _ in episodes]
    counts = {"prefill_tokens": 0, "prefill_positions": 0, "generated_positions": 0, "peak_kv_positions": 0}
    turns = len(episodes[0])
    start, cpu_start = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        for t in range(turns):
            prompts = [history + episode[t]["observation"] for history, episode in zip(histories, episodes)]
            replies = [episode[t]["reply"] for episode in episodes]
            longest, new = max(len(p) for p in prompts), max(replies)
            ids = torch.zeros((len(prompts), longest), dtype=torch.long)
            mask = torch.zeros((len(prompts), longest), dtype=torch.long)
            for row, prompt in enumerate(prompts):
                ids[row, longest - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
                mask[row, longest - len(prompt) :] = 1
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                temperature=None,
                top_p=None,
                top_k=None,
                pad_token_id=0,
                use_cache=True,
            )
            generated = out[:, longest:].tolist()
            histories = [prompt + row[:reply] for prompt, row, reply in zip(prompts, generated, replies)]
            counts["prefill_tokens"] += sum(len(p) for p in prompts)
            counts["prefill_positions"] += len(prompts) * longest
            counts["generated_positions"] += len(prompts) * new
            counts["peak_kv_positions"] = max(counts["peak_kv_positions"], len(prompts) * (longest + new))
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    return {"ok": True, "s": [seconds], "cpu_s": cpu_seconds, **counts, "final_lengths": [len(h) for h in histories]}


def main() -> None:
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["kind"] == "exit":
                return
            reply = hello(req) if req["kind"] == "hello" else run(req)
        except Exception as error:  # the TypeScript side prints it with the request
            reply = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
