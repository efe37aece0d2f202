// The training forward's packed rows (./training.ts with TokenLogProbsOptions.packedRows): a padded RL batch — prompts
// left-padded to end at column P (promptWidth), responses right-padded after them, [B, L] — run as one pad-free
// sequence (./packed-attention.ts):
//   prefix g      the prompt of group g but its last token: columns [P − prompt_g, P − 1) of its first row   p_g tokens
//   continuation  row b's last prompt token and its response but the last token: columns [P − 1, P − 1 + r_b)   r_b
// positions restart per row (prefix 0..p_g − 1, continuation p_g..p_g + r_b − 1, as the padded forward counts them),
// and the head reads the continuations only, scoring targets at columns [P, P + r_b). Every packed tensor is a gather
// of the padded batch's flattened [B·L] tokens (sourceIndex), so ids, positions and router-replay records come the
// same way. The head's per-token results [1, Σ r_b] are unpacked to the padded [B, L − 1] layout the losses read
// (zeros where nothing was scored, as the shared-prefix path leaves them), and the loss's gradients packed back.
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import { type PackedLayout, type PackedPass, packedPass } from './packed-attention.js';
import type { ForwardOptions } from './transformer.js';

/** The rows' real lengths in the padded batch (the host's numbers: nothing is read back). */
export interface PackedRows {
  /** Per row: its prompt's tokens (left-padded to end at promptWidth). */
  promptLengths: readonly number[];
  /** Per row: its response's tokens (right after promptWidth, right-padded). */
  responseLengths: readonly number[];
}

/** What the head's logits are divided by: a number, or per-row temperatures [B, 1, 1] (float32). */
export type HeadTemperature = number | Tensor;

/** What the trunk runs and where the head reads (./training.ts). */
export interface TrunkInput {
  ids: Tensor;
  forward: ForwardOptions;
  /** Final hidden states [1 or B, N, H] → the positions the head reads [B', T', H]. */
  headHidden: (hidden: Tensor) => Tensor;
  /** [B', T'] the next tokens the head scores. */
  targets: Tensor;
  /** The head's per-position values [B', T'] → the batch's [B, L − 1] (zeros where the head read nothing). */
  unpack: (values: Tensor) => Tensor;
  /** The batch's [B, L − 1] → the head's positions [B', T'] (unpack's inverse on what the head read). */
  pack: (values: Tensor) => Tensor;
  /** The temperature of the head's positions [start, start + size) along its dim 1. */
  temperatureAt: (temperature: HeadTemperature, start: number, size: number) => HeadTemperature;
}

/** Checks the rows' lengths against the batch and their groups (rows of a group share their prompt length). */
function checkRows(rows: PackedRows, rowGroup: readonly number[], promptWidth: number, length: number): void {
  const { promptLengths, responseLengths } = rows;
  if (promptLengths.length !== rowGroup.length || responseLengths.length !== rowGroup.length) {
    throw new RangeError(
      `packedRows: ${promptLengths.length} prompt and ${responseLengths.length} response lengths for a batch of ${rowGroup.length}`,
    );
  }
  const groupPrompt = new Map<number, number>();
  rowGroup.forEach((g, b) => {
    const prompt = promptLengths[b] as number;
    const response = responseLengths[b] as number;
    if (!Number.isInteger(prompt) || prompt < 1 || prompt > promptWidth)
      throw new RangeError(`packedRows: row ${b}'s prompt length ${prompt} is not in [1, promptWidth ${promptWidth}]`);
    if (!Number.isInteger(response) || response < 1 || response > length - promptWidth)
      throw new RangeError(`packedRows: row ${b}'s response length ${response} is not in [1, ${length - promptWidth}]`);
    const seen = groupPrompt.get(g);
    if (seen !== undefined && seen !== prompt)
      throw new RangeError(`packedRows: row ${b} has a prompt of ${prompt} tokens, its prompt group ${g} one of ${seen}`);
    groupPrompt.set(g, prompt);
  });
}

/**
 * The index tensors of a packed batch (see the header), made on `device` before any forward is queued: building
 * them uploads host data, which on a GPU waits for the work queued before it. Reused by every forward over the same
 * rows at the same widths (the policy's, the reference's, the critic's).
 */
export interface RowPacking {
  /** The padded batch it packs: [rows, length], prompts ending at promptWidth. */
  readonly rows: number;
  readonly length: number;
  readonly promptWidth: number;
  /** Packed tokens (Σ p_g + Σ r_b) and of them the scored ones (Σ r_b, last). */
  readonly tokens: number;
  readonly scored: number;
  /** [tokens] each packed token's flat [rows·length] column. */
  readonly sourceIndex: Tensor;
  /** [1, tokens] position ids. */
  readonly positions: Tensor;
  /** [scored] each scored position's target column (flat [rows·length]). */
  readonly targetIndex: Tensor;
  /** [scored] each scored position's result column (flat [rows·(length − 1)]). */
  readonly packIndex: Tensor;
  /** [rows·(length − 1)] each result column's scored position, `scored` where none (a zero). */
  readonly unpackIndex: Tensor;
  /** [scored] the row of each scored position. */
  readonly rowIndex: Tensor;
  /** The attention's layout and buckets. */
  readonly attention: PackedPass;
}

/**
 * rows [B, L] whose prompts end at column promptWidth, grouped by prompt (rowGroup, numbered in the order groups
 * first occur), packed without pads (see the header).
 */
export function rowPacking(
  rows: PackedRows,
  rowGroup: readonly number[],
  promptWidth: number,
  length: number,
  device: Tensor['device'] = 'cpu',
): RowPacking {
  const batch = rowGroup.length;
  checkRows(rows, rowGroup, promptWidth, length);
  const { promptLengths, responseLengths } = rows;
  const firstRow: number[] = [];
  rowGroup.forEach((g, b) => {
    if (g === firstRow.length) firstRow.push(b);
  });
  const prefixLengths = firstRow.map((b) => (promptLengths[b] as number) - 1);
  const prefixTokens = prefixLengths.reduce((a, p) => a + p, 0);
  const scored = responseLengths.reduce((a, r) => a + r, 0);
  const source = new Int32Array(prefixTokens + scored); // packed token → flat [B·L] column
  const positions = new Int32Array(prefixTokens + scored);
  const targetSource = new Int32Array(scored); // scored position → flat [B·L] target column
  const packOf = new Int32Array(scored); // scored position → flat [B·(L − 1)] result column
  const unpackOf = new Int32Array(batch * (length - 1)).fill(scored); // result column → scored position (scored: 0)
  const tokenRow = new Int32Array(scored);
  let at = 0;
  firstRow.forEach((b, g) => {
    const p = prefixLengths[g] as number;
    for (let j = 0; j < p; j++, at++) {
      source[at] = b * length + promptWidth - 1 - p + j;
      positions[at] = j;
    }
  });
  let n = 0;
  for (let b = 0; b < batch; b++) {
    const p = (promptLengths[b] as number) - 1;
    for (let j = 0; j < (responseLengths[b] as number); j++, at++, n++) {
      source[at] = b * length + promptWidth - 1 + j;
      positions[at] = p + j;
      targetSource[n] = b * length + promptWidth + j;
      packOf[n] = b * (length - 1) + promptWidth - 1 + j;
      unpackOf[b * (length - 1) + promptWidth - 1 + j] = n;
      tokenRow[n] = b;
    }
  }
  const on = device === 'cpu' ? {} : { device };
  const index = (values: Int32Array, shape = [values.length]) => torch.tensor(values, { dtype: 'int64', shape, ...on });
  const layout: PackedLayout = { prefixLengths, continuationLengths: [...responseLengths], rowPrefix: [...rowGroup] };
  return {
    rows: batch,
    length,
    promptWidth,
    tokens: at,
    scored,
    sourceIndex: index(source),
    positions: index(positions, [1, at]),
    targetIndex: index(targetSource),
    packIndex: index(packOf),
    unpackIndex: index(unpackOf),
    rowIndex: index(tokenRow),
    attention: packedPass(layout, at, device),
  };
}

/**
 * The packed trunk input of `inputIds` [B, L] (see the header), laid out by `packing` (made for these rows at these
 * widths); `replayRouting`: router-replay records [B, L, k] per layer.
 */
export function packedTrunkInput(
  inputIds: Tensor,
  packing: RowPacking,
  replayRouting?: readonly (Tensor | null | undefined)[],
): TrunkInput {
  const [batch, length] = inputIds.shape as [number, number];
  if (batch !== packing.rows || length !== packing.length)
    throw new RangeError(`packedRows: packed for [${packing.rows}, ${packing.length}], the batch is [${batch}, ${length}]`);
  const { sourceIndex, scored, rowIndex, unpackIndex, packIndex } = packing;
  const prefixTokens = packing.tokens - scored;
  const device = inputIds.device;
  const packed = (t: Tensor) =>
    t
      .reshape([batch * length])
      .indexSelect(0, sourceIndex)
      .view([1, -1]);
  return {
    ids: packed(inputIds),
    forward: {
      positionIds: packing.positions,
      packed: packing.attention,
      ...(replayRouting === undefined
        ? {}
        : {
            replayRouting: replayRouting.map((records) => records?.reshape([batch * length, -1]).indexSelect(0, sourceIndex)),
          }),
    },
    headHidden: (hidden) => hidden.narrow(1, prefixTokens, scored),
    targets: inputIds
      .reshape([batch * length])
      .indexSelect(0, packing.targetIndex)
      .view([1, scored]),
    unpack: (values) => {
      const withZero = torch.cat([values.reshape([scored]), torch.zeros([1], { dtype: values.dtype, device })]);
      return withZero.indexSelect(0, unpackIndex).view([batch, length - 1]);
    },
    pack: (values) =>
      values
        .reshape([batch * (length - 1)])
        .indexSelect(0, packIndex)
        .view([1, scored]),
    temperatureAt: (temperature, start, size) =>
      typeof temperature === 'number'
        ? temperature
        : temperature
            .reshape([batch])
            .indexSelect(0, rowIndex.narrow(0, start, size))
            .view([1, size, 1]),
  };
}

/** The packed trunk input of `inputIds` with prompts ending at promptWidth: `rows` packed ahead, or packed now. */
export function packedRowsInput(
  inputIds: Tensor,
  promptWidth: number,
  rows: PackedRows | RowPacking,
  rowGroup: () => readonly number[],
  replayRouting?: readonly (Tensor | null | undefined)[],
): TrunkInput {
  if ('sourceIndex' in rows && rows.promptWidth !== promptWidth)
    throw new RangeError(`packedRows: packed for promptWidth ${rows.promptWidth}, given ${promptWidth}`);
  const packing = 'sourceIndex' in rows ? rows : rowPacking(rows, rowGroup(), promptWidth, inputIds.size(1), inputIds.device);
  return packedTrunkInput(inputIds, packing, replayRouting);
}
