// TensorBoard event files, written directly: TFRecord framing around protobuf-encoded `Event` messages.
//   record  = uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)   (little-endian)
//   masked  = ((crc >>> 15) | (crc << 17)) + 0xa282ead8
//   Event   { 1: double wall_time, 2: int64 step, 3: string file_version, 5: Summary summary }
//   Summary { 1: repeated Value value },  Value { 1: string tag, 2: float simple_value }
// File name as TensorFlow's writer: events.out.tfevents.<seconds>.<hostname>. TensorBoard reads it unchanged.
import { closeSync, fsyncSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { writingFile } from '../../util/file-write.js';

const CRC32C_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
    table[i] = c >>> 0;
  }
  return table;
})();

/** CRC-32C (Castagnoli), as TFRecord uses. */
export function crc32c(bytes: Uint8Array): number {
  let crc = 0xffffffff;
  for (const b of bytes) crc = (CRC32C_TABLE[(crc ^ b) & 0xff] as number) ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

function maskedCrc(bytes: Uint8Array): number {
  const crc = crc32c(bytes);
  return ((((crc >>> 15) | (crc << 17)) >>> 0) + 0xa282ead8) >>> 0;
}

// ---- minimal protobuf encoding ----
function varint(value: number | bigint): number[] {
  let v = BigInt(value);
  if (v < 0n) v += 1n << 64n; // two's complement, as protobuf encodes negative int64
  const out: number[] = [];
  do {
    let byte = Number(v & 0x7fn);
    v >>= 7n;
    if (v !== 0n) byte |= 0x80;
    out.push(byte);
  } while (v !== 0n);
  return out;
}

const key = (field: number, wireType: number) => varint((field << 3) | wireType);

function lengthDelimited(field: number, bytes: Uint8Array): number[] {
  return [...key(field, 2), ...varint(bytes.length), ...bytes];
}

function double(field: number, value: number): number[] {
  const b = Buffer.alloc(8);
  b.writeDoubleLE(value);
  return [...key(field, 1), ...b];
}

function float(field: number, value: number): number[] {
  const b = Buffer.alloc(4);
  b.writeFloatLE(value);
  return [...key(field, 5), ...b];
}

function encodeEvent(
  wallTime: number,
  step: number,
  body: { fileVersion?: string; scalars?: Record<string, number> },
): Uint8Array {
  const bytes = [...double(1, wallTime), ...key(2, 0), ...varint(step)];
  if (body.fileVersion !== undefined) bytes.push(...lengthDelimited(3, Buffer.from(body.fileVersion, 'utf8')));
  if (body.scalars !== undefined) {
    const summary: number[] = [];
    for (const [tag, value] of Object.entries(body.scalars)) {
      const v = [...lengthDelimited(1, Buffer.from(tag, 'utf8')), ...float(2, value)];
      summary.push(...lengthDelimited(1, Uint8Array.from(v)));
    }
    bytes.push(...lengthDelimited(5, Uint8Array.from(summary)));
  }
  return Uint8Array.from(bytes);
}

function frame(data: Uint8Array): Buffer {
  const header = Buffer.alloc(12);
  header.writeBigUInt64LE(BigInt(data.length), 0);
  header.writeUInt32LE(maskedCrc(header.subarray(0, 8)), 8);
  const footer = Buffer.alloc(4);
  footer.writeUInt32LE(maskedCrc(data));
  return Buffer.concat([header, data, footer]);
}

/** Appends scalar summaries to a new event file in `dir`. */
export class TensorBoardWriter {
  readonly file: string;
  #fd: number | null;

  constructor(dir: string) {
    mkdirSync(dir, { recursive: true });
    const now = Date.now() / 1000;
    this.file = join(dir, `events.out.tfevents.${Math.floor(now)}.${hostname()}.${process.pid}`);
    const fd = writingFile('a TensorBoard event file', this.file, () => openSync(this.file, 'a'));
    this.#fd = fd;
    writingFile('the TensorBoard file header', this.file, () =>
      writeSync(fd, frame(encodeEvent(now, 0, { fileVersion: 'brain.Event:2' }))),
    );
  }

  /** Writes the finite values of `scalars` at `step` (TensorBoard shows each tag as a curve). */
  write(step: number, scalars: Record<string, number>, wallTime = Date.now() / 1000): void {
    if (this.#fd === null) throw new Error(`TensorBoardWriter for ${this.file} is closed`);
    const finite = Object.fromEntries(Object.entries(scalars).filter(([, v]) => Number.isFinite(v)));
    if (Object.keys(finite).length === 0) return;
    const fd = this.#fd;
    writingFile(`step ${step}'s TensorBoard scalars`, this.file, () =>
      writeSync(fd, frame(encodeEvent(wallTime, step, { scalars: finite }))),
    );
  }

  flush(): void {
    if (this.#fd !== null) fsyncSync(this.#fd);
  }

  close(): void {
    if (this.#fd === null) return;
    fsyncSync(this.#fd);
    closeSync(this.#fd);
    this.#fd = null;
  }
}
