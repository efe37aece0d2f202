"""The TRL half of the same-batch GRPO comparison (bench/grpo-same-batch.ts runs it and does our half).

  python bench/grpo_same_batch.py --model DIR --train FILE --group 16 --batch 16 --max-tokens 6 --temperature 0.7 \
      --lr 2e-4 [--seed 0] [--threads 2] --out FILE

One GRPO batch, made and trained by TRL's GRPOTrainer with the benchmark's GRPOConfig (bench/grpo_trl.py: loss_type
"dapo", scale_rewards "group", epsilon 0.2, beta 0, AdamW with weight decay 0.01, grad-norm clip 1, here at a constant
LR): `batch` prompts drawn from the train file with `seed`, `group` completions each, sampled by the trainer's own
generation (_generate_and_score_completions: the rewards, the group advantages and the completion mask are TRL's).
Then two updates on that same batch, both with the old log-probs π_old taken before the first update (at the sampling
temperature, as TRL takes them):
  update 1: ratio π/π_old = 1 everywhere: the loss, the gradient norm (before clipping);
  update 2: the same batch again after update 1 (as a second PPO epoch would): ratio ≠ 1, so the clipped share of
            tokens (clip_ratio/region_mean: ratio < 1 − ε with A < 0, or ratio > 1 + ε with A > 0) is non-zero.
Writes to --out: every row (prompt ids, completion ids up to the mask, reward, TRL's advantage, π_old and the log-probs
after each update on the completion tokens) and TRL's figures per update (loss, grad norm, clip fractions).
"""

import argparse
import json
import os
import random

import torch
from grpo_trl import accuracy_reward, grpo_config, is_correct, load_tokenizer, train_dataset


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--group", type=int, default=16)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=6)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    # the GRPOConfig of bench/grpo_trl.py, at a constant LR and without a KL term
    args.steps, args.beta, args.warmup_steps, args.scheduler, args.min_lr_ratio, args.save_every = 2, 0.0, 0, "constant_with_warmup", 0.0, 0
    trainer_dir = os.path.join(os.path.dirname(os.path.abspath(args.out)), "trl-same-batch")
    args.out, out_file = trainer_dir, args.out

    from transformers import AutoModelForCausalLM, set_seed
    from trl import GRPOTrainer

    set_seed(args.seed)
    tokenizer = load_tokenizer(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    dataset = train_dataset(args.train)
    trainer = GRPOTrainer(model=model, reward_funcs=accuracy_reward, args=grpo_config(args), train_dataset=dataset, processing_class=tokenizer)
    picks = random.Random(args.seed).sample(range(len(dataset)), args.batch)
    model.train()
    batch = trainer._generate_and_score_completions([dataset[i] for i in picks for _ in range(args.group)])
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    keep = batch["completion_ids"].size(1)

    def logps():
        with torch.no_grad():
            return trainer._get_per_token_logps_and_entropies(model, input_ids, attention_mask, keep)[0]

    old = logps()
    batch["old_per_token_logps"] = old
    trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train() for each step; one micro-batch here
    for group in trainer.optimizer.param_groups:
        group["lr"] = args.lr
    updates, after = [], []
    for _ in range(2):
        trainer.optimizer.zero_grad()
        loss = trainer.compute_loss(model, batch)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        trainer.optimizer.step()
        metrics = trainer._metrics["train"]
        updates.append(
            {
                "loss": loss.item(),
                "grad_norm": grad_norm.item(),
                "clip_fraction": metrics["clip_ratio/region_mean"][-1],
                "clip_fraction_low": metrics["clip_ratio/low_mean"][-1],
                "clip_fraction_high": metrics["clip_ratio/high_mean"][-1],
            }
        )
        after.append(logps())

    rows = []
    for i in range(input_ids.size(0)):
        mask = batch["completion_mask"][i].bool()
        completion = batch["completion_ids"][i][mask].tolist()
        answer = dataset[picks[i // args.group]]["answer"]
        rows.append(
            {
                "prompt_ids": batch["prompt_ids"][i][batch["prompt_mask"][i].bool()].tolist(),
                "completion_ids": completion,
                "reward": is_correct(tokenizer.decode(completion, skip_special_tokens=True), answer),
                "advantage": batch["advantages"][i].item(),
                "old_logps": old[i][mask].tolist(),
                "logps_after": [a[i][mask].tolist() for a in after],
            }
        )
    with open(out_file, "w") as f:
        json.dump({"group": args.group, "temperature": args.temperature, "lr": args.lr, "rows": rows, "trl": updates}, f)
    print(json.dumps({"rows": len(rows), "out": out_file}))


if __name__ == "__main__":
    main()
