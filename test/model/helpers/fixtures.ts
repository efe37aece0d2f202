// Fixture models written by scripts/fixtures/hf_models.py (small random transformers models + reference logits).
import { fileURLToPath } from 'node:url';
import * as torch from '../../../src/torch/index.js';

export const FIXTURE_MODELS = ['qwen2-tied', 'qwen3-untied', 'llama3-rope', 'llama-yarn'] as const;
export type FixtureModel = (typeof FIXTURE_MODELS)[number];

export const fixturesDir = fileURLToPath(new URL('../../fixtures/models/', import.meta.url));
export const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));

export function modelDir(name: FixtureModel): string {
  return `${fixturesDir}${name}`;
}

/** The reference tensors of a fixture model (kept: the caller disposes them). */
export function loadReference(name: FixtureModel): Map<string, torch.Tensor> {
  const ref = torch.loadSafetensors(`${modelDir(name)}/reference.safetensors`);
  for (const t of ref.values()) torch.keep(t);
  return ref;
}

export function get(ref: Map<string, torch.Tensor>, key: string): torch.Tensor {
  const t = ref.get(key);
  if (t === undefined) throw new Error(`reference tensor '${key}' is missing: rerun scripts/fixtures/hf_models.py`);
  return t;
}

/** max |a - b|, over the entries where `where` (broadcast) is true when given. */
export function maxAbsDiff(a: torch.Tensor, b: torch.Tensor, where?: torch.Tensor): number {
  return torch.scope(() => {
    let d = a.float().sub(b.float()).abs();
    if (where !== undefined) d = d.maskedFill(where.bool().logicalNot(), 0);
    return d.max().item();
  });
}

export function disposeAll(tensors: Iterable<torch.Tensor>): void {
  for (const t of tensors) t.dispose();
}
