// format.image_key (src/rft/buffer/dataset-images.ts): a parquet written by `datasets` with Hugging Face Image
// columns (scripts/fixtures/vision_datasets.py) and a JSONL with relative paths load as tasks whose prompt holds the
// images as OpenAI content parts (the pixels PIL decodes), and as SFT experiences whose prompt ids hold each image's
// placeholder tokens (one per merged patch) and whose images are kept; bad cells are errors naming file, row and key;
// an SFT run over image + text rows lowers its loss.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import {
  decodeImage,
  encodePng,
  imageTokenCount,
  initModel,
  initVisionLanguageModel,
  loadImageProcessorConfig,
  preprocessImages,
  Qwen2_5VLModel,
} from '../../../src/model/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/index.js';
import { rowImageUrls } from '../../../src/rft/buffer/dataset-images.js';
import { loadDpoDataset, loadSftDataset, loadTaskset } from '../../../src/rft/buffer/index.js';
import type { ChatContentPart } from '../../../src/rft/experience.js';
import { TrainStep } from '../../../src/rft/trainer/train-step.js';
import { TrainerVision, withRowImages } from '../../../src/rft/trainer/vision-rows.js';
import { Tokenizer } from '../../../src/tokenizer/index.js';
import * as torch from '../../../src/torch/index.js';

const fixture = fileURLToPath(new URL('../../fixtures/datasets/images/', import.meta.url));
const parquet = join(fixture, 'train.parquet');
type Pixels = { height: number; width: number; data: number[] };
const expected = JSON.parse(readFileSync(join(fixture, 'expected.json'), 'utf8')) as {
  rows: { image: Pixels; images: Pixels[] }[];
};

let work = '';
let modelDir = '';
let raw: Record<string, unknown> = {};
before(async () => {
  work = mkdtempSync(join(tmpdir(), 'trinity-image-key-'));
  modelDir = join(work, 'model');
  raw = initVisionLanguageModel(modelDir, { seed: 4, minPixels: 56 * 56, maxPixels: 56 * 56 * 2 });
  // a JSONL taskset with image paths relative to its folder
  const png = (value: number) => encodePng({ data: new Uint8Array(30 * 40 * 3).fill(value), height: 30, width: 40, channels: 3 });
  writeFileSync(join(work, 'a.png'), await png(10));
  writeFileSync(join(work, 'b.png'), await png(200));
  const rows = [
    { prompt: 'one', response: 'x', picture: 'a.png' },
    { prompt: 'two', response: 'y', picture: ['a.png', 'b.png'] },
    { prompt: 'none', response: 'z', picture: null },
  ];
  writeFileSync(join(work, 'tasks.jsonl'), `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
});
after(() => rmSync(work, { recursive: true, force: true }));

const imageUrls = (parts: ChatContentPart[]) => parts.flatMap((p) => (p.type === 'image_url' ? [p.image_url.url] : []));

test("a parquet's Hugging Face Image columns: task prompts hold the images PIL decodes, at the <image> markers", async () => {
  const taskset = await loadTaskset({
    name: 'pictures',
    path: parquet,
    format: { promptKey: 'question', responseKey: 'answer', imageKey: 'images' },
  });
  const [first, second] = taskset.tasks;
  const content = (task: typeof first) => task?.messages?.[0]?.content as ChatContentPart[];
  // no markers: the images come first
  assert.deepEqual(
    content(first).map((p) => p.type),
    ['image_url', 'text'],
  );
  assert.deepEqual(content(first)[1], { type: 'text', text: 'how many?' });
  // "<image> or <image>?": each image at its marker
  assert.deepEqual(
    content(second).map((p) => (p.type === 'text' ? p.text : 'IMG')),
    ['IMG', ' or ', 'IMG', '?'],
  );
  for (const [row, task] of [first, second].entries()) {
    const urls = imageUrls(content(task));
    assert.equal(urls.length, expected.rows[row]?.images.length);
    for (const [i, url] of urls.entries()) {
      assert.match(url, /^data:image\/png;base64,/);
      const decoded = await decodeImage(url, 'test');
      const pil = expected.rows[row]?.images[i] as Pixels;
      assert.deepEqual([decoded.height, decoded.width, [...decoded.data]], [pil.height, pil.width, pil.data]);
    }
  }
  // the single-image column: one {bytes, path} struct per cell
  for (const [row, task] of [first, second].entries()) {
    const [url] = await rowImageUrls(task?.raw.image, 'image', `row ${row}`, fixture);
    assert.deepEqual([...(await decodeImage(url as string, 'test')).data], expected.rows[row]?.image.data);
  }
});

test('a JSONL with relative paths: one image, a list, none (the prompt stays text)', async () => {
  const taskset = await loadTaskset({ name: 'files', path: join(work, 'tasks.jsonl'), format: { imageKey: 'picture' } });
  const counts = taskset.tasks.map((t) => (t.messages ? imageUrls(t.messages[0]?.content as ChatContentPart[]).length : 0));
  assert.deepEqual(counts, [1, 2, 0]);
  assert.equal(taskset.tasks[2]?.prompt, 'none');
  const second = imageUrls(taskset.tasks[1]?.messages?.[0]?.content as ChatContentPart[]);
  assert.equal((await decodeImage(second[1] as string, 't')).data[0], 200);
});

test("SFT rows: the prompt ids hold each image's placeholder tokens (one per merged patch), the experience its images", async () => {
  const tokenizer = Tokenizer.load(modelDir);
  const rows = await loadSftDataset(parquet, tokenizer, {
    promptKey: 'question',
    responseKey: 'answer',
    imageKey: 'images',
    modelDir,
  });
  const processor = loadImageProcessorConfig(modelDir);
  const pad = raw.image_token_id as number;
  for (const [i, row] of rows.entries()) {
    assert.equal(row.images?.length, expected.rows[i]?.images.length);
    const decoded = await Promise.all((row.images ?? []).map((u) => decodeImage(u, 't')));
    const { grids, pixelValues } = preprocessImages(decoded, processor);
    pixelValues.dispose();
    const prompt = row.tokens.slice(0, row.promptLength);
    assert.equal(
      prompt.filter((t) => t === pad).length,
      grids.reduce((n, g) => n + imageTokenCount(g, 2), 0),
    );
    // each image: <|vision_start|> then its tokens then <|vision_end|>
    const starts = prompt.flatMap((t, k) => (t === raw.vision_start_token_id ? [k] : []));
    assert.equal(starts.length, grids.length);
    assert.equal(prompt[(starts[0] as number) + 1 + imageTokenCount(grids[0] as never, 2)], raw.vision_end_token_id);
  }
});

test('bad cells, marker counts and a text model are errors naming the file, the row and the key', async () => {
  const bad = join(work, 'bad.jsonl');
  const load = async (row: Record<string, unknown>) => {
    writeFileSync(bad, `${JSON.stringify({ prompt: 'p', response: 'r', ...row })}\n`);
    return loadTaskset({ name: 'bad', path: bad, format: { imageKey: 'picture' } });
  };
  await assert.rejects(load({ picture: 3 }), /bad\.jsonl:1: 'picture': must be an image: a file path, .* got number/);
  await assert.rejects(load({ picture: ['a.png', {}] }), /bad\.jsonl:1: 'picture'\[1\]: must be an image/);
  await assert.rejects(load({ picture: 'missing.png' }), /bad\.jsonl:1: 'picture': cannot read image file .*missing\.png/);
  await assert.rejects(
    load({ picture: 'a.png', prompt: '<image> and <image>' }),
    /bad\.jsonl:1: the prompt writes 2 <image> marker\(s\) for 1 image\(s\)/,
  );
  await assert.rejects(
    loadDpoDataset(parquet, Tokenizer.load(modelDir), { imageKey: 'image', modelDir }),
    /train\.parquet: format\.image_key \('image'\): DPO datasets take no images here \(SFT and tasksets do\)/,
  );
  const textModel = join(work, 'text-model');
  initModel(textModel, { hiddenSize: 32, numLayers: 1, numHeads: 2 });
  await assert.rejects(
    loadSftDataset(parquet, Tokenizer.load(textModel), { imageKey: 'image', modelDir: textModel }),
    /format\.image_key gives rows images, which need a vision-language model \(model_type qwen2_5_vl or qwen3_vl\)/,
  );
});

test('an SFT run over image and text rows lowers the loss', async () => {
  const tokenizer = Tokenizer.load(modelDir);
  const format = { promptKey: 'question', responseKey: 'answer', imageKey: 'images', modelDir };
  const rows = [
    ...(await loadSftDataset(parquet, tokenizer, format)),
    ...(await loadSftDataset(join(work, 'tasks.jsonl'), tokenizer, { imageKey: 'picture', modelDir })),
  ];
  assert.deepEqual(
    rows.map((r) => r.images?.length ?? 0),
    [1, 2, 1, 2, 0],
  );
  const model = Qwen2_5VLModel.load(modelDir, { requiresGrad: true });
  const vision = new TrainerVision(model, modelDir, 'cpu');
  try {
    const optimizer = new torch.AdamW([...model.parameters().values()], { lr: 3e-3 });
    const step = new TrainStep({
      model: model.language,
      optimizer,
      algorithm: resolveAlgorithm({ algorithm_type: 'sft' }),
      microBatchSize: 3,
      vision,
    });
    const losses: number[] = [];
    for (let i = 0; i < 6; i++) losses.push((await withRowImages(vision, rows, () => step.run(rows))).loss as number);
    assert.ok((losses.at(-1) as number) < (losses[0] as number) * 0.8, `losses ${losses.map((l) => l.toFixed(3)).join(' ')}`);
    optimizer.dispose();
  } finally {
    model.dispose();
  }
});
