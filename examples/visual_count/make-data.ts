// Generates the visual counting task: "how many red squares?" over images rendered here, with exact answers.
//
//   image    56 x 56 pixels, white, cut into a 4 x 4 grid of 14-pixel cells (one vision patch each): 1-4 red squares
//            (the counts in turn: each set is balanced) and 0 to `distractors` blue squares (default 0), each 12 x 12 inside its own cell at a random
//            offset (0-2 pixels down and right)
//   answer   the number of red squares, one digit
//   sets     held-out then train drawn from one seed; no held-out image (cells, colours, offsets) is in train
//
// Files: OUT/images/<set>-<n>.png (encodePng: lossless) and OUT/<set>.jsonl rows {prompt, response, image} with the
// image path relative to the JSONL (format.image_key: image). The held-out set is never trained on.
// Usage: node --import tsx examples/visual_count/make-data.ts OUT_DIR [--seed N] [--train N] [--heldout N]
//          [--distractors N]
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { encodePng, type ImageBytes } from 'trinity-rft/model';
import { seededRandom, writeJsonlSets } from 'trinity-rft/rft';

export const VISUAL_COUNT_PROMPT = 'how many red squares?';
const CELL = 14;
const GRID = 4;
const SQUARE = 12;
const RED = [220, 30, 30];
const BLUE = [30, 60, 220];

/** A square: its cell (row-major) and its offset inside the cell. */
type Square = readonly [cell: number, dy: number, dx: number];

/** One task: its squares and the answer. */
export interface VisualCountItem {
  red: Square[];
  blue: Square[];
  answer: number;
}

export interface VisualCountRow {
  prompt: string;
  response: string;
  image: string;
}

/**
 * Draws the held-out images (distinct) and then the training images (none of them held out; a training image may
 * repeat: a single square has 16 cells x 9 offsets), each set cycling through the counts 1-4.
 */
export function drawLayouts(
  seed: number,
  counts: { train: number; heldout: number; distractors: number },
): { train: VisualCountItem[]; heldout: VisualCountItem[] } {
  const random = seededRandom(seed, 52);
  const draw = (reds: number): VisualCountItem => {
    const cells = Array.from({ length: GRID * GRID }, (_, i) => i);
    for (let i = cells.length - 1; i > 0; i--) {
      const j = Math.floor(random() * (i + 1));
      [cells[i], cells[j]] = [cells[j] as number, cells[i] as number];
    }
    const blues = Math.floor(random() * (counts.distractors + 1));
    const offset = () => Math.floor(random() * (CELL - SQUARE + 1));
    const squares = (from: number, n: number) =>
      cells
        .slice(from, from + n)
        .sort((a, b) => a - b)
        .map((cell): Square => [cell, offset(), offset()]);
    return { red: squares(0, reds), blue: squares(reds, blues), answer: reds };
  };
  const keyOf = (item: VisualCountItem) => JSON.stringify([item.red, item.blue]);
  const heldout: VisualCountItem[] = [];
  const held = new Set<string>();
  for (let attempts = 0; heldout.length < counts.heldout; attempts++) {
    if (attempts > 100 * counts.heldout) throw new Error(`cannot draw ${counts.heldout} distinct held-out images`);
    const item = draw(1 + (heldout.length % 4));
    if (held.has(keyOf(item))) continue;
    held.add(keyOf(item));
    heldout.push(item);
  }
  const train: VisualCountItem[] = [];
  while (train.length < counts.train) {
    const item = draw(1 + (train.length % 4));
    if (!held.has(keyOf(item))) train.push(item);
  }
  return { train, heldout };
}

/** The image of a layout. */
export function renderLayout(item: VisualCountItem): ImageBytes {
  const side = CELL * GRID;
  const data = new Uint8Array(side * side * 3).fill(255);
  const paint = ([cell, dy, dx]: Square, colour: number[]) => {
    const [top, left] = [Math.floor(cell / GRID) * CELL + dy, (cell % GRID) * CELL + dx];
    for (let y = top; y < top + SQUARE; y++) for (let x = left; x < left + SQUARE; x++) data.set(colour, (y * side + x) * 3);
  };
  for (const square of item.red) paint(square, RED);
  for (const square of item.blue) paint(square, BLUE);
  return { data, height: side, width: side, channels: 3 };
}

/** Writes OUT/images/*.png and OUT/{train,heldout}.jsonl; returns the rows. */
export async function makeVisualCountData(
  out: string,
  options: { seed?: number; train?: number; heldout?: number; distractors?: number } = {},
): Promise<{ train: VisualCountRow[]; heldout: VisualCountRow[] }> {
  const seed = options.seed ?? 0;
  const layouts = drawLayouts(seed, {
    train: options.train ?? 2000,
    heldout: options.heldout ?? 200,
    distractors: options.distractors ?? 0,
  });
  mkdirSync(join(out, 'images'), { recursive: true });
  const rows = async (set: string, items: VisualCountItem[]) => {
    const written: VisualCountRow[] = [];
    for (const [i, item] of items.entries()) {
      const image = `images/${set}-${String(i).padStart(4, '0')}.png`;
      writeFileSync(join(out, image), await encodePng(renderLayout(item)));
      written.push({ prompt: VISUAL_COUNT_PROMPT, response: String(item.answer), image });
    }
    return written;
  };
  const data = { train: await rows('train', layouts.train), heldout: await rows('heldout', layouts.heldout) };
  writeJsonlSets(out, data);
  return data;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      seed: { type: 'string', default: '0' },
      train: { type: 'string', default: '2000' },
      heldout: { type: 'string', default: '200' },
      distractors: { type: 'string', default: '0' },
    },
  });
  const out = positionals[0];
  if (!out) throw new Error('usage: make-data.ts OUT_DIR [--seed N] [--train N] [--heldout N] [--distractors N]');
  const data = await makeVisualCountData(out, {
    seed: Number(values.seed),
    train: Number(values.train),
    heldout: Number(values.heldout),
    distractors: Number(values.distractors),
  });
  console.log(`wrote ${out}: ${data.train.length} train and ${data.heldout.length} held-out images and rows`);
}
