// Reference policies of the train step: the fixed policy the KL terms and DPO compare the trained one with
// (algorithm.useReference). A frozen model, a frozen copy of the policy's current weights, or — with LoRA — the
// policy itself with its adapters disabled (no second copy of the weights). Each gives log-probs without gradient.
import type { LoraModel } from '../../model/lora.js';
import {
  type ImageInputs,
  isVisionLanguageFolder,
  loadVisionLanguageModel,
  type VisionLanguageModel,
} from '../../model/vision/index.js';
import type { RowPacking } from '../../model/packed-rows.js';
import { noGradSteps, type PassSteps } from '../../model/training-trunk.js';
import { type PromptGroups, tokenLogProbs, tokenLogProbsSteps } from '../../model/training.js';
import { CausalLM, type ModelDType } from '../../model/transformer.js';
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';
import { visionOptions } from './vision-rows.js';

export interface LogProbOptions {
  chunkSize?: number;
  /** One temperature, or one per row. */
  temperature?: number | readonly number[];
  /** Only the response columns (from promptWidth − 1) are needed: rows with equal prompts run them once. */
  promptWidth?: number;
  /** Which rows have equal prompts, known ahead (see TokenLogProbsOptions.promptGroups). */
  promptGroups?: PromptGroups;
  /** With promptWidth: the rows packed without pads (TokenLogProbsOptions.packedRows). */
  packedRows?: RowPacking;
  /** The rows' images (a vision-language batch, ./vision-rows.ts): the reference's own model encodes them. */
  images?: ImageInputs | null;
}

/** Log-probs of a fixed reference policy: [B, L] ids → [B, L − 1], no gradient. */
export interface ReferencePolicy {
  logProbs(inputIds: Tensor, attentionMask: Tensor, options?: LogProbOptions): Tensor;
  /**
   * logProbs as a forward-only pass program (../../model/training.ts tokenLogProbsSteps), present when the reference
   * runs the policy's own layers (LoRA's): a fully sharded trainer gathers them one at a time at its pauses.
   */
  logProbsSteps?(inputIds: Tensor, attentionMask: Tensor, options?: LogProbOptions): PassSteps<Tensor>;
}

/** tokenLogProbs of `model` (the language model of `vision`, a vision-language model) over the rows. */
const referenceLogProbs = (
  model: CausalLM,
  vision: VisionLanguageModel | null,
  inputIds: Tensor,
  attentionMask: Tensor,
  options: LogProbOptions,
): Tensor =>
  torch.noGrad(
    () =>
      tokenLogProbs(model, inputIds, {
        ...options,
        attentionMask,
        ...visionOptions(vision, inputIds, attentionMask, options.images, options.promptWidth),
      }).logProbs,
  );

/** A frozen model as the reference (`vision`: the vision-language model whose language model `model` is). */
export function modelReference(model: CausalLM, vision: VisionLanguageModel | null = null): ReferencePolicy {
  return {
    logProbs: (inputIds, attentionMask, options = {}) => referenceLogProbs(model, vision, inputIds, attentionMask, options),
  };
}

/** The model of a folder, frozen, as the reference (a vision-language folder: the whole model); dispose() it. */
export function frozenModelReference(
  dir: string,
  options: { dtype: ModelDType; device?: string },
): ReferencePolicy & { dispose(): void } {
  if (isVisionLanguageFolder(dir)) {
    const base = loadVisionLanguageModel(dir, options);
    return { ...modelReference(base.language, base), dispose: () => base.dispose() };
  }
  const base = CausalLM.load(dir, options);
  return { ...modelReference(base), dispose: () => base.dispose() };
}

/** A frozen copy of `model`'s current weights as the reference (owns the copy: dispose() it). */
export function frozenCopyReference(model: CausalLM): ReferencePolicy & { readonly model: CausalLM; dispose(): void } {
  const weights = torch.noGrad(() => new Map([...model.parameters()].map(([name, t]) => [name, torch.keep(t.detach().clone())])));
  const copy = new CausalLM(model.config, weights);
  return { ...modelReference(copy), model: copy, dispose: () => copy.dispose() };
}

/**
 * With LoRA the reference is the same model with its adapters disabled: no second copy of the weights (`vision`: the
 * vision-language model whose language model carries the adapters; its vision tower is frozen).
 */
export function loraReference(lora: LoraModel, vision: VisionLanguageModel | null = null): ReferencePolicy {
  return {
    logProbs: (inputIds, attentionMask, options = {}) =>
      lora.withAdaptersDisabled(() => referenceLogProbs(lora.base, vision, inputIds, attentionMask, options)),
    // fully sharded trainers only, which refuse vision-language policies (./vision-rows.ts)
    *logProbsSteps(inputIds, attentionMask, options = {}) {
      const steps = noGradSteps(tokenLogProbsSteps(lora.base, inputIds, { ...options, attentionMask }));
      // the adapters are off while each segment computes (and on again at each pause)
      for (;;) {
        const next = lora.withAdaptersDisabled(() => steps.next());
        if (next.done === true) return next.value.logProbs;
        yield next.value;
      }
    },
  };
}
