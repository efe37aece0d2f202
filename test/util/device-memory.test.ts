// A device's memory for the checks that refuse a size before allocating (src/util/device-memory.ts): the CPU's is
// os.totalmem(); a CUDA device's is nvidia-smi's memory.total, asked for the device CUDA_VISIBLE_DEVICES maps cuda:N
// to. The nvidia-smi used here is a script on PATH that answers as the real one does (and records its arguments).
import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { totalmem, tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { deviceMemory, nvidiaSmiDevice, parseNvidiaSmiMemory } from '../../src/util/index.js';

test('cuda:N names the device nvidia-smi knows: its ordinal, or CUDA_VISIBLE_DEVICES entry N', () => {
  assert.equal(nvidiaSmiDevice('cuda', ''), '0');
  assert.equal(nvidiaSmiDevice('cuda:3', ''), '3');
  assert.equal(nvidiaSmiDevice('cuda:1', '4,6'), '6');
  assert.equal(nvidiaSmiDevice('cuda:0', 'GPU-1234, GPU-5678'), 'GPU-1234');
  assert.equal(nvidiaSmiDevice('cuda:2', '4,6'), null); // not visible to this process
  assert.equal(nvidiaSmiDevice('mps', ''), null);
});

test("nvidia-smi's csv answer: MiB and the GPU's name; anything else is no answer", () => {
  assert.deepEqual(parseNvidiaSmiMemory('81559, NVIDIA H100 80GB HBM3\n'), {
    bytes: 81559 * 2 ** 20,
    name: 'NVIDIA H100 80GB HBM3',
  });
  assert.equal(parseNvidiaSmiMemory(''), null);
  assert.equal(parseNvidiaSmiMemory('[N/A], NVIDIA H100'), null);
  assert.equal(parseNvidiaSmiMemory('No devices were found'), null);
});

test('deviceMemory: the machine for the CPU; nvidia-smi for a GPU (asked once); null without an answer', () => {
  assert.deepEqual(deviceMemory('cpu'), { bytes: totalmem(), what: "this machine's memory" });
  const bin = mkdtempSync(join(tmpdir(), 'nvidia-smi-'));
  const calls = join(bin, 'calls.txt');
  writeFileSync(
    join(bin, 'nvidia-smi'),
    `#!/bin/sh\necho "$@" >> ${calls}\nif [ "$2" = "7" ]; then echo "No devices were found"; exit 6; fi\necho "1024, Test GPU"\n`,
  );
  chmodSync(join(bin, 'nvidia-smi'), 0o755);
  const saved = { path: process.env.PATH, visible: process.env.CUDA_VISIBLE_DEVICES };
  process.env.PATH = `${bin}:${process.env.PATH}`;
  process.env.CUDA_VISIBLE_DEVICES = '5,7';
  try {
    const memory = deviceMemory('cuda:0');
    assert.deepEqual(memory, { bytes: 2 ** 30, what: "cuda:0's memory (Test GPU, as nvidia-smi reports it)" });
    assert.deepEqual(deviceMemory('cuda:0'), memory); // cached: nvidia-smi ran once
    assert.equal(deviceMemory('cuda:1'), null); // nvidia-smi fails for device 7
    assert.equal(deviceMemory('cuda:4'), null); // not visible: nvidia-smi not asked
    assert.deepEqual(readFileSync(calls, 'utf8').trim().split('\n'), [
      '-i 5 --query-gpu=memory.total,name --format=csv,noheader,nounits',
      '-i 7 --query-gpu=memory.total,name --format=csv,noheader,nounits',
    ]);
  } finally {
    process.env.PATH = saved.path;
    if (saved.visible === undefined) delete process.env.CUDA_VISIBLE_DEVICES;
    else process.env.CUDA_VISIBLE_DEVICES = saved.visible;
  }
});
