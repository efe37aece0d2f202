// The training forward: per-token log-probabilities (and entropy) of the next tokens, chunked over the sequence so
// that at most one chunk of full-vocabulary logits exists at a time, and a forward+backward that holds a set budget of
// logits more (kept for the backward, so that the head runs once) under autograd too, optionally with activation
// checkpointing (one decoder layer's activations at a time).
//
//   logProbs[b, t] = log softmax(logits[b, t] / τ_b)[inputIds[b, t + 1]]            [B, T-1]
//   entropy[b, t]  = -sum_v p_v log p_v,  p = softmax(logits[b, t] / τ_b)
//   necs[b, t]     = sum_v p_v² (H + log p_v),  H = entropy[b, t]    (clipv's N: E_{v~p}[p_v (H + log p_v)])
// τ_b: one temperature for the batch, or each row's own (a batch of rollouts sampled at different temperatures).
//
// forwardBackward(model, ids, lossFn) computes loss = lossFn({logProbs, entropy}) and accumulates d loss / d params
// into the parameters' .grad in three passes:
//   1. trunk forward (layer inputs saved, no graph, when checkpointing) and the LM head chunk by chunk (./lm-head.ts:
//      each chunk's logits kept for the backward while they fit options.keepLogitsBytes), giving logProbs and
//      entropy as leaf tensors;
//   2. lossFn on those leaves and its backward: d loss / d logProbs and d loss / d entropy (small, [B, T-1]);
//   3. per chunk, d loss / d logits in closed form from those gradients (a chunk that was not kept runs the head
//      again) and the head product's backward into the final hidden states; then the trunk backward: at once, or
//      layer by layer from the last, recomputing each layer from its saved input.
// The result equals plain autograd through lossFn(tokenLogProbs(...)) (tested), with far less memory.
// The trunk's part is ./training-trunk.ts; forwardBackwardSteps is the same pass as a program that pauses at its layer
// boundaries (a fully sharded trainer gathers and releases each layer's parameters there).
//
// With promptWidth (RL batches: left-padded prompts, then responses), rows that share a prompt run it through the
// trunk once: the batch is packed as [distinct prompts ‖ each row's last prompt token + response] (transformer.ts's
// SharedPrefixLayout) and only the response positions reach the head (GRPO's 16 samples per prompt: ~4× fewer tokens
// in the quickstart). A packed continuation also leaves out its last token, which is only a target (a fifth of the
// quickstart's packed tokens). The plain path still runs it: leaving it out saves ~1/T there but changes the rounding
// of every matmul, and the quickstart's SFT landing moved with it (README). Log-probs, entropy and gradients equal the
// unpacked ones (tested). With packedRows (use_remove_padding) the rows run without any pad (./packed-rows.ts).
//
// A mixture of experts (routerAuxLoss): the router's load-balancing loss (./moe.ts) of the pass's real tokens,
// weighted, joins the loss; its gradient enters the trunk's backward with the head's (with checkpointing, each sparse
// layer's term when that layer is recomputed). With a weight, the batch is not packed (the loss covers every token);
// with weight 0 (logged only) a packed pass's value covers the tokens the pass ran.
//
// A vision-language batch (options.multimodal, ./vision/qwen2-5-vl.ts trainingInputs): the trunk takes the token
// embeddings with the image tokens in place and the M-RoPE tables instead of the ids' own; it runs the plain padded
// layout (no shared prompts, no packed rows: the image tokens and 3-D positions follow the padded columns).
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import {
  chunkSpans,
  DEFAULT_KEEP_LOGITS_BYTES,
  headChunk,
  headChunkSize,
  headPass,
  type TokenLogProbs,
  type TokenStatistics,
} from './lm-head.js';
import { LoadBalancing } from './moe.js';
import { type HeadTemperature, type PackedRows, packedRowsInput, type RowPacking, type TrunkInput } from './packed-rows.js';
import {
  beginTrunkPass,
  type MultimodalInputs,
  type PassSteps,
  type ReplayableRandom,
  type RouterAux,
  runPass,
  trunkForward,
} from './training-trunk.js';

export { logitStatistics, type TokenLogProbs, type TokenStatistics } from './lm-head.js';
export type { MultimodalInputs } from './training-trunk.js';
import type { CausalLM, ForwardOptions } from './transformer.js';

export type { PassPoint, PassSteps, ReplayableRandom } from './training-trunk.js';

export interface TokenLogProbsOptions {
  /** [B, T], 1 = real token (padding anywhere); positions follow forward()'s rules. */
  attentionMask?: Tensor;
  positionIds?: Tensor;
  /**
   * Sequence positions per LM-head chunk (default: on the CPU as many as keep a chunk's float32 logits within 32 MiB,
   * at most 256; elsewhere 256; ./lm-head.ts headChunkSize).
   */
  chunkSize?: number;
  /**
   * Bytes of LM-head logits one product computes (default 1 GiB; ./lm-head.ts): forwardBackward keeps them for its
   * backward, so those positions run the head once; the positions past it run chunk by chunk (forwardBackward: the
   * head again in the backward). 0: every chunk on its own.
   */
  keepLogitsBytes?: number;
  /** Also return per-token entropy. */
  entropy?: boolean;
  /** Also return per-token necs (clipv's N, see the header); tokenLogProbs only. */
  necs?: boolean;
  /** Divide logits by this before the softmax, as the sampler does (default 1): one for all rows, or one per row. */
  temperature?: number | readonly number[];
  /**
   * Only the positions from promptWidth - 1 on are needed (a batch whose prompts end at column promptWidth, left-padded,
   * and responses follow): rows with the same prompt then run it through the trunk once (SharedPrefixLayout) when that
   * saves a fifth of the tokens or more. The values before promptWidth - 1 are then 0 (unpacked, they are computed).
   */
  promptWidth?: number;
  /**
   * With promptWidth: which rows have the same first promptWidth - 1 columns (ids and attention mask), from the
   * caller's own data (promptGroups(), made before the forward is queued). The rows are then grouped without reading
   * the ids back and packed without an upload: on a GPU either waits for all work queued before it. Absent: the ids
   * are read back to group the rows.
   */
  promptGroups?: PromptGroups;
  /**
   * With promptWidth: each row's real prompt and response lengths, to run the rows packed end to end without pads
   * (./packed-rows.ts, use_remove_padding), prompts still shared within a group. Absent: padded (packed by prompt
   * when that saves a fifth of the tokens, see promptWidth). A RowPacking made ahead (rowPacking()) uploads nothing.
   */
  packedRows?: PackedRows | RowPacking;
  /**
   * Mixture of experts, router replay (./moe.ts): per layer index, the experts recorded for each token [B, T, k]
   * int64 (-1: none, routed by the router); laid out as the trunk runs the batch (packed prompts included).
   */
  replayRouting?: readonly (Tensor | null | undefined)[];
  /** A vision-language model's inputs for these ids (see the header); the plain padded layout then runs. */
  multimodal?: MultimodalInputs;
}

/** Rows grouped by their prompt's columns: rowGroup[b] is row b's group, groups numbered in the order they first occur. */
export interface PromptGroups {
  readonly rowGroup: readonly number[];
  /** [groups] int64: each group's first row. */
  readonly representatives: Tensor;
  /** [rows] int64: rowGroup. */
  readonly rowPrefix: Tensor;
}

/** PromptGroups on `device` from each row's group (checked: numbered 0, 1, ... in the order groups first occur). */
export function promptGroups(rowGroup: readonly number[], device = 'cpu'): PromptGroups {
  const representatives: number[] = [];
  rowGroup.forEach((group, b) => {
    if (!Number.isInteger(group) || group < 0 || group > representatives.length)
      throw new RangeError(
        `promptGroups: row ${b} is in group ${group}; groups are numbered 0, 1, ... in the order they first occur (next: ${representatives.length})`,
      );
    if (group === representatives.length) representatives.push(b);
  });
  const on = device === 'cpu' ? {} : { device };
  return {
    rowGroup: [...rowGroup],
    representatives: torch.tensor(representatives, { dtype: 'int64', ...on }),
    rowPrefix: torch.tensor([...rowGroup], { dtype: 'int64', ...on }),
  };
}

/** Checks the inputs; the temperature is one number, or one per row when the rows differ. */
function checkInputs(inputIds: Tensor, options: TokenLogProbsOptions): { temperature: number | number[] } {
  if (inputIds.ndim !== 2 || inputIds.size(1) < 2) {
    throw new TypeError(`token log-probs need inputIds [batch, seq >= 2], got [${inputIds.shape.join(', ')}]`);
  }
  headChunkSize(options.chunkSize, 1, 1, 'cpu'); // checks a given size
  const given = options.temperature ?? 1;
  const rows = typeof given === 'number' ? [given] : given;
  if (typeof given !== 'number' && rows.length !== inputIds.size(0))
    throw new RangeError(`temperature: ${rows.length} per-row temperatures for ${inputIds.size(0)} rows`);
  rows.forEach((t, b) => {
    if (!(t > 0 && Number.isFinite(t)))
      throw new RangeError(`temperature${typeof given === 'number' ? '' : `[${b}]`} must be a finite number > 0, got ${t}`);
  });
  const first = rows[0] as number;
  return { temperature: rows.every((t) => t === first) ? first : [...rows] };
}

/** The temperature as the head divides by it (a per-row tensor is created in the caller's scope). */
function headTemperature(temperature: number | number[], device: Tensor['device']): HeadTemperature {
  if (typeof temperature === 'number') return temperature;
  return torch.tensor(Float32Array.from(temperature), { shape: [temperature.length, 1, 1], device });
}

/** The head's results [B, T'] left-padded with `offset` zeros to [B, T − 1], and back; one temperature per row. */
const paddedColumns = (offset: number): Pick<TrunkInput, 'unpack' | 'pack' | 'temperatureAt'> => ({
  unpack: (values) => padLeft(values, offset),
  pack: (values) => (offset === 0 ? values : values.narrow(1, offset, values.size(1) - offset)),
  temperatureAt: (temperature) => temperature,
});

/**
 * What the trunk runs and where the head reads: the batch as given, its prompts packed once per distinct prompt
 * (a row's continuation starts at its prompt's last token, so it predicts the first response token), or its rows
 * packed without pads (options.packedRows, ./packed-rows.ts).
 */
function trunkInput(inputIds: Tensor, options: TokenLogProbsOptions): TrunkInput {
  const plain: TrunkInput = {
    ids: inputIds,
    forward: { ...passOptions(options), ...replayLayout(options, (t) => t.reshape([-1, t.size(-1)])) },
    headHidden: (hidden) => hidden.narrow(1, 0, inputIds.size(1) - 1),
    targets: inputIds.slice(1, 1),
    ...paddedColumns(0),
  };
  const { promptWidth } = options;
  if (promptWidth === undefined || options.multimodal !== undefined) return plain;
  const [rows, length] = inputIds.shape as [number, number];
  if (!Number.isInteger(promptWidth) || promptWidth < 1 || promptWidth >= length) {
    throw new RangeError(`promptWidth must be an integer in [1, ${length - 1}] for sequences of ${length}, got ${promptWidth}`);
  }
  const prefixLength = promptWidth - 1; // the prompt's last token opens each continuation
  const suffixLength = length - prefixLength;
  const given = options.promptGroups;
  if (given !== undefined && given.rowGroup.length !== rows)
    throw new RangeError(`promptGroups: ${given.rowGroup.length} rows grouped for a batch of ${rows}`);
  if (options.packedRows !== undefined) {
    if (options.positionIds !== undefined) throw new TypeError('packedRows: positions restart per row; give no positionIds');
    const rowGroup = () => given?.rowGroup ?? readPromptGroups(inputIds, options.attentionMask, prefixLength);
    return packedRowsInput(inputIds, promptWidth, options.packedRows, rowGroup, options.replayRouting);
  }
  if (prefixLength === 0 || options.positionIds !== undefined) return plain;
  const rowGroup = given?.rowGroup ?? readPromptGroups(inputIds, options.attentionMask, prefixLength);
  const groups = rowGroup.reduce((max, g) => Math.max(max, g + 1), 0);
  if (!computedPositions(rows, length, promptWidth, groups).packed) return plain;
  const { representatives, rowPrefix } = given ?? promptGroups(rowGroup, inputIds.device);
  const real = options.attentionMask?.bool() ?? torch.ones([rows, length], { dtype: 'bool', device: inputIds.device });
  const positions = real.long().cumsum(-1).sub(1).maskedFill(real.logicalNot(), 1); // forward()'s default
  const prefix = (t: Tensor) => t.indexSelect(0, representatives).narrow(1, 0, prefixLength);
  // a continuation runs its prompt's last token and the response but the last token (only a target)
  const continuationLength = suffixLength - 1;
  const suffix = (t: Tensor) => t.narrow(1, prefixLength, continuationLength);
  const flat = (t: Tensor) => t.reshape([1, -1]);
  return {
    ids: torch.cat([flat(prefix(inputIds)), flat(suffix(inputIds))], 1),
    forward: {
      positionIds: torch.cat([flat(prefix(positions)), flat(suffix(positions))], 1),
      ...replayLayout(options, (t) => torch.cat([prefix(t), suffix(t)].map((part) => part.reshape([-1, t.size(-1)])))),
      sharedPrefix: {
        prefixMask: prefix(real),
        suffixMask: suffix(real),
        rowPrefix,
      },
    },
    headHidden: (hidden) =>
      hidden.narrow(1, groups * prefixLength, rows * continuationLength).reshape([rows, continuationLength, -1]),
    targets: inputIds.narrow(1, promptWidth, suffixLength - 1),
    ...paddedColumns(prefixLength),
  };
}

/**
 * Positions the trunk computes for `rows` rows of `length` columns whose prompts end at column promptWidth, with
 * `groups` distinct prompts (forwardBackward and tokenLogProbs with promptWidth and promptGroups):
 *   packed  groups·(promptWidth − 1) + rows·(length − promptWidth)   when that is ≤ 0.8·rows·length
 *   plain   rows·length                                              otherwise
 * (the trainer's token-budget micro-batches count their tokens with it: src/rft/trainer/token-budget.ts).
 */
export function computedPositions(
  rows: number,
  length: number,
  promptWidth: number,
  groups: number,
): { packed: boolean; positions: number } {
  const plain = rows * length;
  const packed = promptWidth > 1 ? groups * (promptWidth - 1) + rows * (length - promptWidth) : plain;
  return packed <= 0.8 * plain ? { packed: true, positions: packed } : { packed: false, positions: plain };
}

/** Each row's group by its first prefixLength columns of ids and mask, read back from the device. */
function readPromptGroups(inputIds: Tensor, attentionMask: Tensor | undefined, prefixLength: number): number[] {
  const ids = inputIds.narrow(1, 0, prefixLength).toArray() as number[][];
  const mask = attentionMask?.narrow(1, 0, prefixLength).toArray() as (number | boolean)[][] | undefined;
  return groupsByKey(ids.map((row, b) => (mask ? `${row.join(',')}|${mask[b]?.map(Number).join('')}` : row.join(','))));
}

/** Each row's group for promptGroups(): rows with equal keys share a group, numbered in the order groups first occur. */
export function groupsByKey(keys: readonly string[]): number[] {
  const groupOf = new Map<string, number>();
  return keys.map((key) => {
    let group = groupOf.get(key);
    if (group === undefined) {
      group = groupOf.size;
      groupOf.set(key, group);
    }
    return group;
  });
}

/** [B, n] → [B, offset + n], zeros first. */
function padLeft(t: Tensor, offset: number): Tensor {
  if (offset === 0) return t;
  return torch.cat([torch.zeros([t.size(0), offset], { dtype: t.dtype, device: t.device }), t], 1);
}

/** forward()'s replayRouting from the [B, T, k] records, each laid out by `layout` as the trunk runs the tokens. */
function replayLayout(options: TokenLogProbsOptions, layout: (records: Tensor) => Tensor): ForwardOptions {
  const given = options.replayRouting;
  return given === undefined ? {} : { replayRouting: given.map((records) => records && layout(records)) };
}

/**
 * The layouts the batch-invariant forward (./batch-invariant.ts) covers: rows padded and whole, or packed without pads
 * (packedRows); the padded shared-prompt layout (promptWidth alone) is not covered. So with promptWidth and no
 * packedRows the rows are packed here when that computes at most PACK_AT_MOST of the padded rows' positions
 *   Σ_g (p_g − 1) + Σ_b r_b  ≤  PACK_AT_MOST · B · L
 * (the mode attends row by row either way, so a packed batch costs about its tokens, and the quickstart's GRPO batch,
 * 16 prompts × 16 answers, computes 4.5× less: bench/README.md), else run padded and whole. The lengths are read from
 * the attention mask (the mode runs on the CPU: nothing waits); a mask that is not one run per row from the prompt's
 * first token stays padded.
 */
function invariantLayout(inputIds: Tensor, options: TokenLogProbsOptions): TokenLogProbsOptions {
  const { promptWidth, attentionMask } = options;
  const padded = { ...options, promptWidth: undefined };
  if (options.packedRows !== undefined || promptWidth === undefined) return options.packedRows ? options : padded;
  const [rows, length] = inputIds.shape as [number, number];
  if (!Number.isInteger(promptWidth) || promptWidth < 2 || promptWidth >= length || options.positionIds) return padded;
  const real = (attentionMask?.toArray() as (number | boolean)[][] | undefined)?.map((row) => row.map(Boolean));
  const lengths = Array.from({ length: rows }, (_, b) => {
    const row = real?.[b] ?? Array<boolean>(length).fill(true);
    const prompt = row.slice(0, promptWidth).filter(Boolean).length;
    const response = row.slice(promptWidth).filter(Boolean).length;
    const oneRun = row.every((on, j) => on === (j >= promptWidth - prompt && j < promptWidth + response));
    return oneRun && prompt >= 1 && response >= 1 ? { prompt, response } : null;
  });
  if (lengths.some((l) => l === null)) return padded;
  const rowGroup = options.promptGroups?.rowGroup ?? readPromptGroups(inputIds, attentionMask, promptWidth - 1);
  const promptLengths = lengths.map((l) => (l as { prompt: number }).prompt);
  const responseLengths = lengths.map((l) => (l as { response: number }).response);
  const firstRows = rowGroup.flatMap((g, b) => (rowGroup.indexOf(g) === b ? [b] : []));
  const packed = firstRows.reduce((a, b) => a + (promptLengths[b] as number) - 1, 0) + responseLengths.reduce((a, r) => a + r, 0);
  return packed <= PACK_AT_MOST * rows * length ? { ...options, packedRows: { promptLengths, responseLengths } } : padded;
}

/** Packed when that computes at most this share of the padded positions (invariantLayout; the trainer's own rule). */
const PACK_AT_MOST = 0.8;

function passOptions(options: TokenLogProbsOptions): ForwardOptions {
  return {
    ...(options.attentionMask ? { attentionMask: options.attentionMask } : {}),
    ...(options.positionIds ? { positionIds: options.positionIds } : {}),
  };
}

/**
 * Per-token log-probabilities (and entropy, necs) of the next tokens. Records autograd when grad mode is on and the
 * parameters require grad (then every chunk's graph is kept until backward: use forwardBackward to bound memory).
 */
export function tokenLogProbs(model: CausalLM, inputIds: Tensor, options: TokenLogProbsOptions = {}): TokenStatistics {
  return torch.scope(() => runPass(tokenLogProbsSteps(model, inputIds, options)));
}

/**
 * tokenLogProbs as a forward-only pass program that pauses at the trunk's layer boundaries (a start point with
 * backward: false, each layer's forward, end), for a fully sharded trainer that gathers one layer at a time for its
 * whole-batch forwards. Run it inside torch.scopeSteps (and noGradSteps, for values only).
 */
export function* tokenLogProbsSteps(
  model: CausalLM,
  inputIds: Tensor,
  options: TokenLogProbsOptions = {},
): PassSteps<TokenStatistics> {
  const checked = checkInputs(inputIds, options);
  yield { at: 'start', backward: false };
  const temperature = headTemperature(checked.temperature, inputIds.device);
  const input = trunkInput(inputIds, model.batchInvariant ? invariantLayout(inputIds, options) : options);
  // model.forward(ids, { output: 'hidden' }) a layer at a time, in its own scope as there: only the hidden states stay
  function* trunk(): PassSteps<Tensor> {
    const pass = beginTrunkPass(model, input, options.multimodal);
    let x = pass.embed();
    for (let i = 0; i < pass.numLayers; i++) {
      yield { at: 'layer', layer: i, phase: 'forward', edge: 'before' };
      x = pass.layer(i, x);
      yield { at: 'layer', layer: i, phase: 'forward', edge: 'after' };
    }
    pass.commit();
    return pass.norm(x);
  }
  const hidden = input.headHidden(yield* torch.scopeSteps(trunk()));
  const { targets } = input;
  const chunkSize = headChunkSize(options.chunkSize, targets.size(0), model.config.vocabSize, targets.device);
  const temperatureAt = (start: number, size: number) => input.temperatureAt(temperature, start, size);
  const withEntropy = options.entropy ?? false;
  const withNecs = options.necs ?? false;
  // values only: the head's pass (./lm-head.ts); recorded, each chunk's graph through its statistics
  const parts: TokenStatistics[] = torch.isGradEnabled()
    ? chunkSpans(targets.size(1), chunkSize).map(([start, size]) =>
        headChunk(
          model,
          hidden.narrow(1, start, size),
          targets.narrow(1, start, size),
          temperatureAt(start, size),
          withEntropy,
          withNecs,
        ),
      )
    : [
        headPass(model, {
          hidden,
          targets,
          chunkSize,
          temperatureAt,
          withEntropy,
          withNecs,
          keepBytes: options.keepLogitsBytes ?? DEFAULT_KEEP_LOGITS_BYTES,
          record: false,
        }),
      ];
  const joined = (field: keyof TokenStatistics) =>
    parts.length === 1
      ? (parts[0] as TokenStatistics)[field]
      : torch.cat(
          parts.map((p) => p[field] as Tensor),
          1,
        );
  const statistics = {
    logProbs: input.unpack(joined('logProbs') as Tensor),
    entropy: withEntropy ? input.unpack(joined('entropy') as Tensor) : null,
    necs: withNecs ? input.unpack(joined('necs') as Tensor) : null,
  };
  yield { at: 'end' };
  return statistics;
}

export interface ForwardBackwardOptions extends Omit<TokenLogProbsOptions, 'necs'> {
  /** Recompute each decoder layer during backward instead of keeping its activations (default false). */
  checkpoint?: boolean;
  /** Needed with checkpoint when the forward draws random numbers (model.isStochastic: LoRA dropout in training). */
  random?: ReplayableRandom<unknown>;
  /**
   * A mixture of experts: add this weight times the router's load-balancing loss (./moe.ts) to the loss; 0 only
   * computes it (result.routerAuxLoss). Ignored by dense models.
   */
  routerAuxLoss?: number;
}

export interface ForwardBackwardResult {
  /**
   * The loss, detached ([] on the model's device). Not read to a number here: on a GPU that would wait for the
   * backward to finish before the caller could queue more work (`.item()` it when the number is wanted).
   */
  loss: Tensor;
  /** Detached [B, T-1] float32 values, for metrics. */
  logProbs: Tensor;
  entropy: Tensor | null;
  /** The load-balancing loss, unweighted and detached, when routerAuxLoss was given to a mixture of experts. */
  routerAuxLoss: Tensor | null;
}

/** The real tokens of a pass's input [N] (null: all), as forward() lays them out. */
function passRealTokens(forward: ForwardOptions): Tensor | null {
  if (forward.attentionMask !== undefined) return forward.attentionMask.reshape([-1]);
  if (forward.packed !== undefined) return null; // no pads
  const shared = forward.sharedPrefix;
  if (shared === undefined) return null;
  return torch.cat([shared.prefixMask.reshape([-1]), shared.suffixMask.reshape([-1])]);
}

/**
 * loss = lossFn({ logProbs, entropy }) and its gradients accumulated into the parameters' .grad, holding the logits
 * that fit options.keepLogitsBytes plus one chunk of full-vocabulary activations (and, with checkpoint, one layer's
 * activations). See the header comment.
 */
export function forwardBackward(
  model: CausalLM,
  inputIds: Tensor,
  lossFn: (inputs: TokenLogProbs) => Tensor,
  options: ForwardBackwardOptions = {},
): ForwardBackwardResult {
  return torch.scope(() => runPass(forwardBackwardSteps(model, inputIds, lossFn, options)));
}

/**
 * forwardBackward as a program that pauses at the trunk's layer boundaries (./training-trunk.ts PassPoint), for a
 * caller that has work to do there (a fully sharded trainer's collectives). Run it inside torch.scopeSteps.
 */
export function* forwardBackwardSteps(
  model: CausalLM,
  inputIds: Tensor,
  lossFn: (inputs: TokenLogProbs) => Tensor,
  options: ForwardBackwardOptions = {},
): PassSteps<ForwardBackwardResult> {
  const checked = checkInputs(inputIds, options);
  const random = options.random ?? null;
  if (options.checkpoint && model.isStochastic && random === null) {
    throw new Error(
      'activation checkpointing recomputes each layer, so dropout would draw a different mask than the forward did: ' +
        'pass the random state to replay (options.random: the LoraModel), or use LoRA dropout 0, eval mode, or ' +
        'checkpoint: false',
    );
  }
  const withEntropy = options.entropy ?? false;
  yield { at: 'start' };
  const temperature = headTemperature(checked.temperature, inputIds.device);
  const moe = model.config.moe;
  // a weighted load-balancing loss covers every real token, as transformers': no shared-prompt packing, which
  // runs each prompt once and leaves out each row's last token
  const weightedAux = moe !== null && (options.routerAuxLoss ?? 0) !== 0;
  const input = trunkInput(
    inputIds,
    weightedAux ? { ...options, promptWidth: undefined } : model.batchInvariant ? invariantLayout(inputIds, options) : options,
  );
  const aux: RouterAux | null =
    moe !== null && options.routerAuxLoss !== undefined
      ? {
          balancing: new LoadBalancing(moe, passRealTokens(input.forward)),
          weight: options.routerAuxLoss,
          recomputed: null,
          recomputing: false,
        }
      : null;
  const onRouting = (_layer: number, routing: { logits: Tensor }) => {
    if (aux === null) return;
    if (aux.recomputing) aux.recomputed = aux.balancing.layerTerm(routing.logits);
    else aux.balancing.observe(routing.logits);
  };
  const pass = beginTrunkPass(
    model,
    aux === null ? input : { ...input, forward: { ...input.forward, onRouting } },
    options.multimodal,
  );

  // 1. trunk forward (its backward runs after the head's, from hiddenLeaf.grad)
  const { hiddenLeaf, backwardTrunk } = yield* trunkForward(pass, options.checkpoint ?? false, random, aux);
  const withAux = (result: Omit<ForwardBackwardResult, 'routerAuxLoss'>): ForwardBackwardResult => {
    if (aux === null) return { ...result, routerAuxLoss: null };
    const value = torch.noGrad(() => aux.balancing.loss());
    return { ...result, loss: aux.weight === 0 ? result.loss : result.loss.add(value.mul(aux.weight)), routerAuxLoss: value };
  };

  const headHidden = input.headHidden(hiddenLeaf);
  const { targets, unpack } = input;
  const chunkTemperature = (s: number, n: number) => input.temperatureAt(temperature, s, n);
  const chunkSize = headChunkSize(options.chunkSize, targets.size(0), model.config.vocabSize, targets.device);
  if (targets.size(1) <= chunkSize) {
    // the whole sequence is one chunk: one head pass with its graph, the loss straight through it
    const part = headChunk(model, headHidden, targets, chunkTemperature(0, targets.size(1)), withEntropy);
    const padded = { logProbs: unpack(part.logProbs), entropy: part.entropy && unpack(part.entropy) };
    const loss = lossFn(padded);
    if (loss.numel !== 1) throw new TypeError(`lossFn must return a scalar, got shape [${loss.shape.join(', ')}]`);
    loss.backward();
    yield* backwardTrunk();
    yield { at: 'end' };
    return withAux({ loss: loss.detach(), logProbs: padded.logProbs.detach(), entropy: padded.entropy?.detach() ?? null });
  }

  // 1b. the head: the logits that fit the budget in one product, kept for the backward (./lm-head.ts)
  const head = headPass(model, {
    hidden: headHidden,
    targets,
    chunkSize,
    temperatureAt: chunkTemperature,
    withEntropy,
    keepBytes: options.keepLogitsBytes ?? DEFAULT_KEEP_LOGITS_BYTES,
    record: true,
  });
  const values = { logProbs: unpack(head.logProbs), entropy: head.entropy && unpack(head.entropy) };
  const logProbsLeaf = values.logProbs.detach().requiresGrad_();
  const entropyLeaf = values.entropy?.detach().requiresGrad_() ?? null;

  // 2. the loss and its gradient with respect to the per-token values
  const loss = lossFn({ logProbs: logProbsLeaf, entropy: entropyLeaf });
  if (loss.numel !== 1) throw new TypeError(`lossFn must return a scalar, got shape [${loss.shape.join(', ')}]`);
  loss.backward();
  // in the head's layout (the packed positions, or the columns it read)
  const gradLogProbs = logProbsLeaf.grad && input.pack(logProbsLeaf.grad);
  const gradEntropy = entropyLeaf?.grad ? input.pack(entropyLeaf.grad) : null;

  // 3. the head's backward into hiddenLeaf.grad (and the LM head's weight), then the trunk's
  head.backward(gradLogProbs, gradEntropy);
  if (gradLogProbs !== null || gradEntropy !== null || aux !== null) yield* backwardTrunk();
  yield { at: 'end' };
  return withAux({ loss: loss.detach(), logProbs: values.logProbs, entropy: values.entropy });
}
