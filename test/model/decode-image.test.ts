// Image decoding (src/model/vision/decode-image.ts): every source form gives the same RGB bytes, alpha is dropped and
// grey expanded as Pillow's convert('RGB') does, EXIF orientation is applied, and bad sources name where they came from.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, test } from 'node:test';
import sharp from 'sharp';
import { decodeImage, encodePng, ImageInputError, imageDataUrl } from '../../src/model/index.js';

const dir = mkdtempSync(join(tmpdir(), 'decode-image-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** A 3 x 5 RGB image whose bytes are all different. */
const image = { data: Uint8Array.from({ length: 3 * 5 * 3 }, (_, i) => (i * 37) % 256), height: 3, width: 5, channels: 3 };

test('a PNG decodes to its bytes from bytes, a data URL, a path and a file:// URL', async () => {
  const png = await encodePng(image);
  const file = join(dir, 'a.png');
  writeFileSync(file, png);
  const url = await imageDataUrl(png, 'bytes');
  assert.match(url, /^data:image\/png;base64,/);
  for (const source of [png, url, file, pathToFileURL(file).href]) {
    const decoded = await decodeImage(source, 'test');
    assert.deepEqual([decoded.height, decoded.width, decoded.channels], [3, 5, 3]);
    assert.deepEqual(decoded.data, image.data);
  }
  assert.equal(await imageDataUrl(file, 'file'), url);
  // a base64 data URL without an image type is re-labelled from its bytes
  assert.equal(await imageDataUrl(`data:;base64,${Buffer.from(png).toString('base64')}`, 'untyped'), url);
});

test('alpha is dropped (not blended) and grey is expanded to three equal channels', async () => {
  const rgba = Uint8Array.from([10, 20, 30, 0, 40, 50, 60, 128]);
  const png = await sharp(rgba, { raw: { width: 2, height: 1, channels: 4 } })
    .png()
    .toBuffer();
  assert.deepEqual((await decodeImage(png, 'rgba')).data, Uint8Array.from([10, 20, 30, 40, 50, 60]));
  const grey = await sharp(Uint8Array.from([7, 200]), { raw: { width: 2, height: 1, channels: 1 } })
    .png()
    .toBuffer();
  assert.deepEqual((await decodeImage(grey, 'grey')).data, Uint8Array.from([7, 7, 7, 200, 200, 200]));
});

test('EXIF orientation is applied (exif_transpose): orientation 6 turns a 2 x 1 image into 1 x 2', async () => {
  const jpeg = await sharp(Uint8Array.from(new Array(2 * 1 * 3).fill(128)), { raw: { width: 2, height: 1, channels: 3 } })
    .jpeg()
    .withMetadata({ orientation: 6 })
    .toBuffer();
  const decoded = await decodeImage(jpeg, 'rotated');
  assert.deepEqual([decoded.height, decoded.width], [2, 1]);
});

test('bad sources are named errors', async () => {
  const cases: [string, RegExp][] = [
    ['https://example.com/cat.png', /row 3: remote image URLs are not fetched/],
    ['data:image/png,abc', /row 3: a data URL must be base64/],
    [join(dir, 'missing.png'), /row 3: cannot read image file .*missing\.png/],
    ['data:image/png;base64,aGVsbG8=', /row 3: not a decodable image/],
  ];
  for (const [source, message] of cases)
    await assert.rejects(decodeImage(source, 'row 3'), (e) => e instanceof ImageInputError && message.test(e.message));
  await assert.rejects(decodeImage(new Uint8Array(0), 'row 3'), /row 3: the image is empty/);
});
