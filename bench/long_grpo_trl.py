"""The TRL half of bench:long-grpo (bench/long-grpo.bench.ts drives it over JSON lines, one request per stdin line).

  {"kind": "init", "model": DIR, "rows": FILE, "micro": 2, "threads": 2, "lr": 1e-6, "device": "cpu", "out": DIR}
      loads the model folder (its config's dtype, e.g. bfloat16: the weights, the gradients and AdamW's state in that
      dtype, as a model loaded with dtype=torch.bfloat16 trains under TRL) and builds TRL's GRPOTrainer around it with
      the GRPOConfig below; checks that TRL's reward function gives every row of FILE the reward written there.
  {"kind": "step", "step": S}
      one GRPO optimizer step on step S's rows of FILE (the same rows our side trains): replies {"s": [seconds],
      "computed": positions the model ran, "trained": completion tokens in the loss}.
  {"kind": "profile", "step": S}
      the same under torch.profiler: the ops by self CPU time.

The step is TRL's training step on a generation batch that is already made, i.e. the part of GRPOTrainer after
_generate_and_score_completions: the batch as that function returns it (prompts left-padded, completions right-padded
to the longest of the whole generation batch, TRL's `pad`; group advantages (r - mean_g) / (std_g + 1e-4); no
old log-probs, since num_iterations 1 makes π_old = π), shuffled and split into `gradient_accumulation_steps`
micro-batches of `micro` rows as _prepare_inputs does, then per micro-batch compute_loss and backward (gradient
checkpointing on, GRPOConfig's default), then the grad-norm clip at 1.0, AdamW's step and zero_grad, as the HF
Trainer's loop does after the accumulation. TRL 1.x's GRPOTrainer has no padding-free option (padding_free exists in
SFTConfig / DPOConfig only), so this is TRL as it runs by default.
"""

import json
import os
import re
import sys
import time

import torch

_BOXED = re.compile(r"\\boxed\{(-?\d+)\}")


def boxed_answer_reward(completions, answer, **_):
    """1 where the completion's last \\boxed{n} is the task's answer, else 0 (the rule bench/long-grpo.bench.ts scores
    its rows with)."""
    rewards = []
    for completion, reference in zip(completions, answer, strict=True):
        text = completion[0]["content"] if isinstance(completion, list) else completion
        found = _BOXED.findall(text)
        rewards.append(1.0 if found and int(found[-1]) == int(reference) else 0.0)
    return rewards


class TrlSide:
    def __init__(self, req):
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
        from trl import GRPOConfig, GRPOTrainer

        torch.set_num_threads(int(req["threads"]))
        with open(req["rows"]) as f:
            data = json.load(f)
        self.steps = data["steps"]
        self.group = int(data["group"])
        self.micro = int(req["micro"])
        rows_per_step = len(self.steps[0])
        if rows_per_step % self.micro != 0:
            raise ValueError(f"micro-batch of {self.micro} rows does not divide a step's {rows_per_step} rows")
        self.tokenizer = PreTrainedTokenizerFast.from_pretrained(req["model"])
        with open(os.path.join(req["model"], "config.json")) as f:
            dtype = getattr(torch, json.load(f).get("dtype", "float32"))
        self.model = AutoModelForCausalLM.from_pretrained(req["model"], dtype=dtype)
        prompts = [{"prompt": [{"role": "user", "content": r["question"]}], "answer": r["answer"]} for rows in self.steps for r in rows]
        config = GRPOConfig(
            output_dir=req["out"],
            per_device_train_batch_size=self.micro,
            gradient_accumulation_steps=rows_per_step // self.micro,
            num_generations=self.group,
            num_iterations=1,
            max_completion_length=max(len(r["completion_ids"]) for rows in self.steps for r in rows),
            learning_rate=float(req["lr"]),
            lr_scheduler_type="constant",
            weight_decay=0.01,
            max_grad_norm=1.0,
            beta=0.0,
            epsilon=0.2,
            loss_type="dapo",
            scale_rewards="group",
            gradient_checkpointing=True,
            use_cpu=req["device"] == "cpu",
            bf16=dtype == torch.bfloat16,
            report_to=[],
            logging_steps=1,
            save_strategy="no",
            seed=0,
        )
        self.trainer = GRPOTrainer(
            model=self.model,
            reward_funcs=boxed_answer_reward,
            args=config,
            train_dataset=Dataset.from_list(prompts),
            processing_class=self.tokenizer,
        )
        self.model = self.trainer.model
        self.device = next(self.model.parameters()).device
        # what Trainer.train() does before its loop: checkpointing on, training mode, the optimizer
        self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=config.gradient_checkpointing_kwargs)
        self.model.config.use_cache = False
        self.model.train()
        self.trainer.create_optimizer()
        self.trainer.current_gradient_accumulation_steps = config.gradient_accumulation_steps
        for s, rows in enumerate(self.steps):
            texts = [self.tokenizer.decode(r["completion_ids"], skip_special_tokens=True) for r in rows]
            rewards = boxed_answer_reward(texts, [r["answer"] for r in rows])
            for i, (ours, trl) in enumerate(zip([r["reward"] for r in rows], rewards, strict=True)):
                if ours != trl:
                    raise ValueError(f"step {s} row {i}: the rows file says reward {ours}, TRL's reward function {trl}")

    def generation_batch(self, rows):
        """The dict _generate_and_score_completions returns for these rows (see the header)."""
        from trl.trainer.utils import pad

        pad_id = self.tokenizer.pad_token_id
        prompts = [torch.tensor(r["prompt_ids"]) for r in rows]
        completions = [torch.tensor(r["completion_ids"]) for r in rows]
        completion_mask = pad([torch.ones_like(c) for c in completions], padding_value=0, padding_side="right")
        rewards = torch.tensor([float(r["reward"]) for r in rows]).view(-1, self.group)
        advantages = (rewards - rewards.mean(dim=1, keepdim=True)) / (rewards.std(dim=1, keepdim=True) + 1e-4)
        batch = {
            "prompt_ids": pad(prompts, padding_value=pad_id, padding_side="left"),
            "prompt_mask": pad([torch.ones_like(p) for p in prompts], padding_value=0, padding_side="left"),
            "completion_ids": pad(completions, padding_value=pad_id, padding_side="right"),
            "completion_mask": completion_mask,
            "advantages": advantages.flatten(),
            "num_items_in_batch": completion_mask.sum(),
        }
        return {k: v.to(self.device) for k, v in batch.items()}

    def step(self, s):
        from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

        rows = self.steps[s % len(self.steps)]
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        batch = self.generation_batch(rows)
        micro_batches = split_tensor_dict(shuffle_sequence_dict(batch), self.trainer.current_gradient_accumulation_steps)
        computed = 0
        for micro in micro_batches:
            loss = self.trainer.compute_loss(self.model, micro)
            loss.backward()
            computed += micro["prompt_ids"].numel() + micro["completion_ids"].numel()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.trainer.optimizer.step()
        self.trainer.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        return {"s": [seconds], "cpu_s": time.process_time() - cpu0, "computed": computed, "trained": int(batch["num_items_in_batch"].item()), "loss": loss.item()}

    def profile(self, s):
        """One more step under torch.profiler (CPU activity; Kineto, as our side's): ops by self time, largest first."""
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        t0 = time.perf_counter()
        with profile(activities=activities) as prof:
            self.step(s)
        wall_ms = (time.perf_counter() - t0) * 1e3
        ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        return {"wall_ms": wall_ms, "ops": [{"name": e.key, "selfMs": e.self_cpu_time_total / 1e3, "calls": e.count} for e in ops]}


def main():
    side = None
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        if req.get("kind") == "exit":
            break
        try:
            if req["kind"] == "init":
                side = TrlSide(req)
                reply = {"ok": True, "torch": torch.__version__, "device": str(side.device)}
            elif req["kind"] == "step":
                reply = {"ok": True, **side.step(int(req["step"]))}
            elif req["kind"] == "profile":
                reply = {"ok": True, **side.profile(int(req["step"]))}
            else:
                raise ValueError(f"unknown request kind {req['kind']!r}")
        except Exception as error:  # reported to the TypeScript side, which fails loudly
            reply = {"ok": False, "error": f"{type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
