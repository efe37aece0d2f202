#!/usr/bin/env python3
"""The Hugging Face transformers half of bench/model.bench.ts (`node --import tsx bench/model.bench.ts`).

A small server like tensor_bench.py: model.bench.ts spawns it, writes one JSON request per line on stdin and reads
one JSON reply per line on stdout, alternating these requests with its own measurements (ABBA order), so both
sides run the same workloads on the same model folder, one at a time, under the same machine load.

Requests (every reply carries "ok"; timings are seconds per call, one entry per sample):
  {"kind": "hello", "threads": 2, "device": "cpu"}      -> {"ok": true, "torch": ..., "transformers": ..., ...}
  {"kind": "load", "dir": "...", "dtype": "float32", "train": false}
      loads the folder with AutoModelForCausalLM (sdpa attention); train: also an AdamW (fused when available)
  {"kind": "generate", "prompts": [[ids...], ...], "maxNewTokens": 32, "doSample": false, "seed": 0,
   "samples": 1, "warmup": 0}                            -> {"ok": true, "s": [...], "tokens": [[ids...], ...]}
      model.generate over the left-padded prompts, with min_new_tokens = max_new_tokens (every row generates
      exactly max_new_tokens) and use_cache=True; tokens: the new ids of the last call
  {"kind": "train", "ids": [[ids...], ...], "samples": 1, "warmup": 0, "lr": 1e-5}
                                                         -> {"ok": true, "s": [...], "loss": first loss}
      one step = model(input_ids, labels=input_ids).loss.backward(), AdamW step, zero_grad(set_to_none=True)
  {"kind": "load_vlm", "dir": "...", "dtype": "float32"}  -> {"ok": true, "parameters": N}
      a Qwen2.5-VL folder: Qwen2_5_VLForConditionalGeneration (sdpa), its image processor and tokenizer
  {"kind": "generate_vlm", "images": [base64 PNG, ...], "question": "...", "maxNewTokens": 32, "samples": 1,
   "warmup": 0}                                          -> {"ok": true, "s": [...], "cpu": [...], "tokens": [[ids...]],
                                                             "promptIds": [[ids...], ...]}
      one chat prompt per image ([image, question], the chat template with add_generation_prompt) through what
      Qwen2_5_VLProcessor does for images, then greedy model.generate (min_new_tokens = max_new_tokens); the timed
      call includes decoding the PNGs, the image processor and the placeholder expansion; cpu: this process's CPU
      seconds per call (time.process_time)
  generate or train with "profile": "PATH": one call under torch.profiler instead (CPU, and CUDA kernels on a GPU)
                                                         -> {"ok": true, "trace": PATH, "table": key_averages table}
      the Chrome trace goes to PATH
  {"kind": "unload"}
  {"kind": "exit"}
"""

from __future__ import annotations

import base64
import io
import json
import math
import sys
import time
from typing import Any

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class State:
    device = "cpu"
    model: Any = None
    image_processor: Any = None
    tokenizer: Any = None
    optimizer: torch.optim.Optimizer | None = None
    fused = False
    first_loss = math.nan


def sync() -> None:
    if State.device.startswith("cuda"):
        torch.cuda.synchronize()


def hello(req: dict[str, Any]) -> dict[str, Any]:
    import transformers

    torch.set_num_threads(int(req["threads"]))
    # off: libtorch's bf16 products are its reference loops, as on a CPU without AVX-512 (--onednn off)
    torch.backends.mkldnn.enabled = bool(req.get("onednn", True))
    State.device = req["device"]
    name = torch.cuda.get_device_name() if State.device.startswith("cuda") else "cpu"
    return {
        "ok": True,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": torch.get_num_threads(),
        "python": sys.version.split()[0],
        "device": name,
        "onednn": torch.backends.mkldnn.enabled,
    }


def unload() -> None:
    State.model = None
    State.image_processor = None
    State.tokenizer = None
    State.optimizer = None
    State.first_loss = math.nan
    if State.device.startswith("cuda"):
        torch.cuda.empty_cache()


def load(req: dict[str, Any]) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    unload()
    model = AutoModelForCausalLM.from_pretrained(req["dir"], dtype=DTYPES[req["dtype"]], attn_implementation="sdpa")
    model.to(State.device)
    if req.get("train"):
        model.train()
        params = [p for p in model.parameters() if p.requires_grad]
        try:
            State.optimizer = torch.optim.AdamW(params, lr=float(req.get("lr", 1e-5)), fused=True)
            State.fused = True
        except (RuntimeError, ValueError):  # no fused kernel for this device/dtype
            State.optimizer = torch.optim.AdamW(params, lr=float(req.get("lr", 1e-5)))
            State.fused = False
    else:
        model.eval()
        for p in model.parameters():
            p.requires_grad_(False)
    State.model = model
    # a mixture of experts: how transformers runs the experts (grouped_mm where torch has it, else a loop over them)
    experts = getattr(model.config, "_experts_implementation", None)
    return {"ok": True, "parameters": sum(p.numel() for p in model.parameters()), "fused": State.fused, "experts": experts}


def left_padded(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), longest), dtype=torch.long)
    for row, p in enumerate(prompts):
        ids[row, longest - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[row, longest - len(p) :] = 1
    return ids.to(State.device), mask.to(State.device)


def generate(req: dict[str, Any]) -> dict[str, Any]:
    model = State.model
    pad = model.generation_config.pad_token_id
    if pad is None:
        pad = 0
    if isinstance(pad, list):
        pad = pad[0]
    ids, mask = left_padded(req["prompts"], int(pad))
    new = int(req["maxNewTokens"])
    sampling: dict[str, Any] = (
        {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
        if req["doSample"]
        else {"do_sample": False, "temperature": None, "top_k": None, "top_p": None}
    )

    def once() -> torch.Tensor:
        if req["doSample"]:
            torch.manual_seed(int(req["seed"]))
        with torch.inference_mode():
            out = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=new,
                min_new_tokens=new,
                use_cache=True,
                pad_token_id=int(pad),
                **sampling,
            )
        sync()
        return out

    if req.get("profile"):
        return profiled(once, req["profile"])
    out = None
    for _ in range(int(req.get("warmup", 0))):
        out = once()
    times = []
    for _ in range(int(req["samples"])):
        t0 = time.perf_counter_ns()
        out = once()
        times.append((time.perf_counter_ns() - t0) / 1e9)
    assert out is not None
    new_ids = out[:, ids.shape[1] :].tolist()
    if any(len(row) != new for row in new_ids):
        raise RuntimeError(f"generate returned {[len(r) for r in new_ids]} new tokens per row, expected {new}")
    return {"ok": True, "s": times, "tokens": new_ids}


def load_vlm(req: dict[str, Any]) -> dict[str, Any]:
    # Qwen2_5_VLProcessor itself (and the fast image processor) need torchvision for their video half, so the
    # processor's image steps are taken from its parts: the PIL image processor and the tokenizer (see vlm_inputs)
    from transformers import AutoTokenizer, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    unload()
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
        req["dir"], dtype=DTYPES[req["dtype"]], attn_implementation="sdpa"
    )
    model.to(State.device)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    State.model = model
    State.image_processor = Qwen2VLImageProcessorPil.from_pretrained(req["dir"])
    State.tokenizer = AutoTokenizer.from_pretrained(req["dir"])
    State.tokenizer.padding_side = "left"
    return {"ok": True, "parameters": sum(p.numel() for p in model.parameters())}


def vlm_inputs(images: list[str], question: str) -> dict[str, torch.Tensor]:
    """Qwen2_5_VLProcessor's image path: each <|image_pad|> repeated grid_t * grid_h * grid_w / merge^2 times,
    and mm_token_type_ids marking the image tokens."""
    from PIL import Image

    decoded = [Image.open(io.BytesIO(base64.b64decode(png))).convert("RGB") for png in images]
    processed = State.image_processor(images=decoded, return_tensors="pt")
    merge = State.image_processor.merge_size**2
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
    template = State.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    texts = [
        template.replace("<|image_pad|>", "<|image_pad|>" * (int(grid.prod()) // merge), 1)
        for grid in processed["image_grid_thw"]
    ]
    text = State.tokenizer(texts, return_tensors="pt", padding=True)
    # the processor's mm_token_type_ids (1 at image tokens): without them generate() gives the prompt 1-D positions,
    # not Qwen2.5-VL's multimodal RoPE
    image_token = State.model.config.image_token_id
    return {
        "input_ids": text["input_ids"].to(State.device),
        "attention_mask": text["attention_mask"].to(State.device),
        "mm_token_type_ids": (text["input_ids"] == image_token).int().to(State.device),
        "pixel_values": processed["pixel_values"].to(State.device, State.model.dtype),
        "image_grid_thw": processed["image_grid_thw"].to(State.device),
    }


def generate_vlm(req: dict[str, Any]) -> dict[str, Any]:
    model = State.model
    new = int(req["maxNewTokens"])
    pad = State.tokenizer.pad_token_id or 0

    def once() -> tuple[torch.Tensor, torch.Tensor]:
        inputs = vlm_inputs(req["images"], req["question"])
        with torch.inference_mode():
            out = model.generate(
                **inputs,
                max_new_tokens=new,
                min_new_tokens=new,
                use_cache=True,
                pad_token_id=int(pad),
                do_sample=False,
                temperature=None,
                top_k=None,
                top_p=None,
            )
        sync()
        return inputs["input_ids"], out

    ids = out = None
    for _ in range(int(req.get("warmup", 0))):
        ids, out = once()
    times, cpu = [], []
    for _ in range(int(req["samples"])):
        t0, c0 = time.perf_counter_ns(), time.process_time()
        ids, out = once()
        times.append((time.perf_counter_ns() - t0) / 1e9)
        cpu.append(time.process_time() - c0)
    assert ids is not None and out is not None
    new_ids = out[:, ids.shape[1] :].tolist()
    if any(len(row) != new for row in new_ids):
        raise RuntimeError(f"generate returned {[len(r) for r in new_ids]} new tokens per row, expected {new}")
    return {"ok": True, "s": times, "cpu": cpu, "tokens": new_ids, "promptIds": ids.tolist()}


def train(req: dict[str, Any]) -> dict[str, Any]:
    model, optimizer = State.model, State.optimizer
    if optimizer is None:
        raise RuntimeError("train: load the model with train: true first")
    ids = torch.tensor(req["ids"], dtype=torch.long, device=State.device)

    def step() -> float:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        return loss.item()

    if req.get("profile"):
        return profiled(step, req["profile"])
    for _ in range(int(req.get("warmup", 0))):
        loss = step()
        if math.isnan(State.first_loss):
            State.first_loss = loss
    times = []
    for _ in range(int(req["samples"])):
        t0 = time.perf_counter_ns()
        loss = step()
        times.append((time.perf_counter_ns() - t0) / 1e9)
        if math.isnan(State.first_loss):
            State.first_loss = loss
    return {"ok": True, "s": times, "loss": State.first_loss, "fused": State.fused}


def profiled(call: Any, trace: str) -> dict[str, Any]:
    """One call under torch.profiler (CPU, and CUDA kernels on a GPU): a Chrome trace at `trace` and the op table."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    on_gpu = State.device.startswith("cuda")
    if on_gpu:
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        call()
    prof.export_chrome_trace(trace)
    sort = "self_cuda_time_total" if on_gpu else "self_cpu_time_total"
    return {"ok": True, "trace": trace, "table": prof.key_averages().table(sort_by=sort, row_limit=15)}


def handle(req: dict[str, Any]) -> dict[str, Any]:
    kind = req["kind"]
    if kind == "hello":
        return hello(req)
    if kind == "load":
        return load(req)
    if kind == "generate":
        return generate(req)
    if kind == "load_vlm":
        return load_vlm(req)
    if kind == "generate_vlm":
        return generate_vlm(req)
    if kind == "train":
        return train(req)
    if kind == "unload":
        unload()
        return {"ok": True}
    raise ValueError(f"unknown request kind {kind!r}")


def main() -> None:
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
