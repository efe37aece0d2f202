"""The TRL half of the GRPO benchmark (bench/grpo.bench.ts runs it): TRL's GRPOTrainer on the quickstart's GRPO stage.

  python bench/grpo_trl.py --model DIR --train FILE --eval FILE --group 16 --batch 16 --max-tokens 6 --lr 1e-4 \
      --steps 40 [--temperature 1.0] [--beta 0.0] [--warmup-steps 0] [--scheduler constant_with_warmup|cosine]
      [--min-lr-ratio 0.0] [--seed 0] [--in-order] [--threads 2] [--save-every K] [--out DIR]
  python bench/grpo_trl.py --eval-only DIR [DIR ...] --eval FILE [--max-tokens 6] [--tokenizer DIR]
      [--sampled K --temperature T --seed 0]

Train: one optimizer step per GRPO step, on `batch` prompts x `group` completions sampled at `temperature` (TRL's
generation_batch_size = per_device_train_batch_size = batch * group, steps_per_generation 1, one iteration per
generation), reward = exact answer (the last integer of the completion equals the reference, as accuracy_reward),
group-normalised advantages (scale_rewards "group"), token-mean clipped loss (loss_type "dapo", epsilon 0.2), KL
`beta` (k3 to the starting model; 0 loads no reference), AdamW (betas 0.9/0.999, weight decay 0.01), grad norm clip
1.0, `warmup_steps` of linear warm-up then a constant LR or a cosine down to min_lr_ratio × LR, float32 on the CPU.
The prompts come in the sampler's seeded shuffle, or with --in-order in the file's order (shuffle_dataset False: the
benchmark then gives both sides one shuffled file).
With --save-every K the model is saved every K steps (OUT/checkpoint-K, the Trainer's own checkpoints, model only);
saving happens between steps, outside the step times.

Eval: greedy `model.generate` over every eval prompt rendered with the model's chat template (add_generation_prompt),
at most `max-tokens` new tokens, scored with the same reward; the accuracy is the share of prompts answered right.
--eval-only scores each model folder given, in one process (the tokenizer of --tokenizer, else of each folder), and
prints {"accuracies": [...], "eval_s": [...]} in the folders' order; with --sampled K the accuracy is mean@K of K
answers per prompt sampled at --temperature (torch seed --seed) instead of the greedy one.

Train prints one JSON line: seconds of every training step (generation included), generation seconds and generated
tokens of every step, the accuracy after training, the final model folder and the saved checkpoints by step.
"""

import argparse
import json
import os
import re
import sys
import time

import torch


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


_INTEGER = re.compile(r"-?\d+")


def is_correct(text, reference):
    numbers = _INTEGER.findall(text.replace(",", ""))
    return 1.0 if numbers and int(numbers[-1]) == int(reference) else 0.0


def greedy_accuracy(model, tokenizer, rows, max_tokens, batch_size=64, samples=0, temperature=1.0):
    """Greedy answers to every eval prompt (chat template, left padding); the share scored 1 by is_correct. With
    samples > 0: that many answers per prompt sampled at `temperature` (no top-k/top-p), the share of right ones
    (mean@samples)."""
    tokenizer.padding_side = "left"
    model.eval()
    correct = 0.0
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            texts = [
                tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True)
                for r in chunk
            ]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0, "num_return_sequences": samples}
            out = model.generate(
                **enc,
                **(sampling if samples > 0 else {"do_sample": False}),
                max_new_tokens=max_tokens,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
            answers = [row for row in chunk for _ in range(max(samples, 1))]
            for row, ids in zip(answers, out[:, enc["input_ids"].shape[1] :], strict=True):
                correct += is_correct(tokenizer.decode(ids, skip_special_tokens=True), row["response"])
    return correct / (len(rows) * max(samples, 1))


def load_tokenizer(folder):
    """The folder's tokenizer.json as written. (AutoTokenizer in transformers 5 picks Qwen2Tokenizer from the model
    type and swaps in its byte-level pre-tokenizer, which drops the character tokenizer's newlines.)"""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(folder)


def eval_only(args):
    from transformers import AutoModelForCausalLM

    rows = read_jsonl(args.eval)
    accuracies, seconds = [], []
    for folder in args.eval_only:
        tokenizer = load_tokenizer(args.tokenizer or folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        t0 = time.perf_counter()
        accuracies.append(greedy_accuracy(model, tokenizer, rows, args.max_tokens, samples=args.sampled, temperature=args.temperature))
        seconds.append(time.perf_counter() - t0)
    print(json.dumps({"accuracies": accuracies, "eval_s": seconds}))


def train_dataset(path):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["response"]} for r in read_jsonl(path)])


def accuracy_reward(completions, answer, **_):
    return [is_correct(c[0]["content"] if isinstance(c, list) else c, a) for c, a in zip(completions, answer, strict=True)]


def grpo_config(args):
    """The GRPOConfig of the quickstart's GRPO stage (see the header); bench/grpo_same_batch.py uses it too."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=args.out,
        max_steps=args.steps,
        per_device_train_batch_size=args.batch * args.group,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=1,
        num_generations=args.group,
        max_completion_length=args.max_tokens,
        temperature=args.temperature,
        top_p=1.0,
        learning_rate=args.lr,
        lr_scheduler_type="cosine_with_min_lr" if args.scheduler == "cosine" else "constant_with_warmup",
        **({"lr_scheduler_kwargs": {"min_lr_rate": args.min_lr_ratio}} if args.scheduler == "cosine" else {}),
        warmup_steps=args.warmup_steps,
        weight_decay=0.01,
        adam_beta1=0.9,
        adam_beta2=0.999,
        max_grad_norm=1.0,
        beta=args.beta,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        gradient_checkpointing=False,
        use_cpu=True,
        bf16=False,
        logging_steps=1,
        **({"save_strategy": "steps", "save_steps": args.save_every, "save_only_model": True} if args.save_every else {"save_strategy": "no"}),
        report_to="none",
        seed=args.seed,
        shuffle_dataset=not getattr(args, "in_order", False),
        disable_tqdm=True,
    )


def train(args):
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOTrainer

    tokenizer = load_tokenizer(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    dataset = train_dataset(args.train)
    config = grpo_config(args)

    class Timed(GRPOTrainer):
        """Times every generation call and counts the tokens it generated (up to and including the eos)."""

        generation = []

        def _generate_single_turn(self, *a, **k):
            t0 = time.perf_counter()
            completion_ids, logprobs = super()._generate_single_turn(*a, **k)
            self.generation.append((time.perf_counter() - t0, sum(len(c) for c in completion_ids)))
            return completion_ids, logprobs

    class StepTimes(TrainerCallback):
        def __init__(self):
            self.times = []
            self.rewards = []
            self.t0 = 0.0

        def on_step_begin(self, *_a, **_k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *_a, **_k):
            self.times.append(time.perf_counter() - self.t0)

        def on_log(self, _args, _state, _control, logs=None, **_k):
            if logs and "reward" in logs:
                self.rewards.append(logs["reward"])

    steps = StepTimes()
    trainer = Timed(
        model=model,
        reward_funcs=accuracy_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[steps],
    )
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    final = os.path.join(args.out, "final_model")
    trainer.save_model(final)
    t0 = time.perf_counter()
    accuracy = greedy_accuracy(trainer.model, tokenizer, read_jsonl(args.eval), args.max_tokens)
    eval_s = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "step_s": steps.times,
                "generate_s": [g[0] for g in Timed.generation],
                "generated_tokens": [g[1] for g in Timed.generation],
                "rewards": steps.rewards,
                "train_s": train_s,
                "accuracy": accuracy,
                "eval_s": eval_s,
                "final_model": final,
                "checkpoints": {str(k): os.path.join(args.out, f"checkpoint-{k}") for k in range(args.save_every, args.steps + 1, args.save_every or 1)}
                if args.save_every
                else {},
                "versions": {"trl": __import__("trl").__version__, "transformers": __import__("transformers").__version__, "torch": torch.__version__},
            }
        )
    )


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model")
    p.add_argument("--train")
    p.add_argument("--eval", required=True)
    p.add_argument("--eval-only", metavar="DIR", nargs="+")
    p.add_argument("--tokenizer", metavar="DIR")
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--sampled", type=int, default=0, metavar="K", help="--eval-only: mean@K of K answers sampled at --temperature")
    p.add_argument("--group", type=int, default=16)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=6)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--beta", type=float, default=0.0)
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--scheduler", choices=["constant_with_warmup", "cosine"], default="constant_with_warmup")
    p.add_argument("--min-lr-ratio", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--in-order", action="store_true", help="prompts in the file's order (no shuffle)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--out", default="runs/bench-grpo/trl")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if args.eval_only:
        torch.manual_seed(args.seed)
        eval_only(args)
    elif not (args.model and args.train):
        sys.exit("grpo_trl.py: give --model and --train (or --eval-only DIR)")
    else:
        train(args)


if __name__ == "__main__":
    main()
