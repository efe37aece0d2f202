// Shared by the engine tests: fixture models, a character tokenizer covering their 128-token vocabulary, and
// reference decoding with full (cache-free) forwards.
import { copyFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RolloutEngine, type RolloutEngineOptions, type TokenEvent } from '../../src/engine/index.js';
import { CausalLM } from '../../src/model/index.js';
import { DEFAULT_ALPHABET, Tokenizer, writeCharTokenizer } from '../../src/tokenizer/index.js';
import * as torch from '../../src/torch/index.js';

export const modelDir = (name: 'qwen2-tied' | 'qwen3-untied' | 'llama3-rope'): string =>
  fileURLToPath(new URL(`../fixtures/models/${name}`, import.meta.url));

/** Writes a character tokenizer with exactly the fixture models' 128 ids (4 specials + 124 characters) into dir. */
export function writeFixtureTokenizer(dir: string): void {
  const size = writeCharTokenizer(dir, `${DEFAULT_ALPHABET}àáâãäåæçèéêëìíîïðñòóôõöøùúûü`);
  if (size !== 128) throw new Error(`fixture tokenizer has ${size} ids, expected 128`);
}

/** The fixture character tokenizer (eos <|im_end|> = 2). */
export function fixtureTokenizer(): Tokenizer {
  const dir = mkdtempSync(join(tmpdir(), 'engine-tok-'));
  writeFixtureTokenizer(dir);
  return Tokenizer.load(dir);
}

/** qwen2-tied in a RolloutEngine with the fixture tokenizer, on one intra-op thread; close() frees engine and model. */
export function fixtureEngine(options: { maxLength: number; slots: number }): {
  model: CausalLM;
  engine: RolloutEngine;
  close(): Promise<void>;
} {
  torch.setNumThreads(1);
  const model = CausalLM.load(modelDir('qwen2-tied'));
  const engine = new RolloutEngine(model, { tokenizer: fixtureTokenizer(), ...options });
  return {
    model,
    engine,
    close: async () => {
      await engine.close();
      model.dispose();
    },
  };
}

/** A copy of a fixture model folder with the fixture tokenizer beside it. */
export function fixtureModelWithTokenizer(name: 'qwen2-tied' | 'qwen3-untied' | 'llama3-rope'): string {
  const dir = mkdtempSync(join(tmpdir(), `engine-${name}-`));
  for (const file of ['config.json', 'generation_config.json', 'model.safetensors'])
    copyFileSync(join(modelDir(name), file), join(dir, file));
  writeFixtureTokenizer(dir);
  return dir;
}

/** Greedy decoding with a full forward over the whole sequence at every step (no cache): the reference. */
export function referenceGreedy(model: CausalLM, prompt: readonly number[], steps: number): number[] {
  const ids = [...prompt];
  for (let i = 0; i < steps; i++) {
    const next = torch.noGrad(() =>
      torch.scope(() => {
        const logits = model.forward(torch.tensor([ids.map(BigInt)]));
        return logits
          .select(1, ids.length - 1)
          .argmax(-1)
          .item();
      }),
    );
    ids.push(next);
  }
  return ids.slice(prompt.length);
}

/** log_softmax(logits / temperature)[token] of each completion token from one full training-style forward. */
export function referenceLogprobs(
  model: CausalLM,
  prompt: readonly number[],
  completion: readonly number[],
  temperature = 1,
): number[] {
  return torch.noGrad(() =>
    torch.scope(() => {
      const ids = [...prompt, ...completion];
      const logits = model.forward(torch.tensor([ids.map(BigInt)])).select(0, 0); // [T, V]
      const scored = logits
        .narrow(0, prompt.length - 1, completion.length)
        .float()
        .div(temperature)
        .logSoftmax(-1);
      return scored
        .gather(1, torch.tensor([completion.map((c) => [BigInt(c)])]).squeeze(0))
        .squeeze(1)
        .toArray() as number[];
    }),
  );
}

export const maxDiff = (a: readonly number[], b: readonly number[]): number =>
  a.reduce((m, v, i) => Math.max(m, Math.abs(v - (b[i] as number))), 0);

/**
 * Counts a request's streamed tokens: pass `onToken` with the request, then `await reached(n, generation)`. The engine
 * calls onToken inside a step, so the await resumes right after the step that produced the n-th token and before the
 * next one runs: a known point of the generation, reached by an event rather than a poll or a delay. If the generation
 * ends (or fails) before its n-th token, the wait rejects and says how many tokens came, instead of hanging.
 */
export function tokenCounter(): {
  onToken: (event: TokenEvent) => void;
  reached: (n: number, generation: Promise<unknown>) => Promise<void>;
} {
  let seen = 0;
  const waiters: { n: number; resolve: () => void }[] = [];
  return {
    onToken: () => {
      seen++;
      for (const waiter of waiters) if (seen === waiter.n) waiter.resolve();
    },
    reached: (n, generation) => {
      if (seen >= n) return Promise.resolve();
      const reached = new Promise<void>((resolve) => waiters.push({ n, resolve }));
      const ended = generation.then(
        () => {
          throw new Error(`the generation ended after ${seen} tokens, before its token ${n}`);
        },
        (error: unknown) => {
          throw new Error(`the generation failed after ${seen} tokens, before its token ${n}`, { cause: error });
        },
      );
      return Promise.race([reached, ended]);
    },
  };
}

/** n deterministic token ids in [3, 30) (inside the character tokenizer's vocabulary), varied by seed. */
export const charTokenIds = (n: number, seed: number): number[] =>
  Array.from({ length: n }, (_, i) => 3 + ((seed * 13 + i * 7 + ((i * i) % 5)) % 27));

/** Runs fn with an engine over `model` (no end-of-sequence ids: fixed lengths), closed afterwards. */
export async function withEngineOver<T>(
  model: CausalLM,
  options: RolloutEngineOptions,
  fn: (engine: RolloutEngine) => Promise<T>,
): Promise<T> {
  const engine = new RolloutEngine(model, { eosTokenIds: [], ...options });
  try {
    return await fn(engine);
  } finally {
    await engine.close();
  }
}
