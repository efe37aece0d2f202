// Devices in runs (trainer.device, explorer.rollout_model.device, mode colocate): what the settings resolve to on
// this machine, the errors for a GPU that is not there, and the placement line `trinity run` prints. Without a GPU
// the CUDA placements are checked against a stated GPU count (resolveDevice's cudaDevices); loading on a GPU is the
// GPU script's part (bench/gpu-run.sh).
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { type Config, ConfigError, loadConfig, parseConfig, resolveStages } from '../../../src/rft/run/config/index.js';
import { describePlacement } from '../../../src/rft/run/distributed.js';
import { runConfig, stageSettings } from '../../../src/rft/run/index.js';
import * as torch from '../../../src/torch/index.js';
import { makeJob } from '../run/helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-devices-'));
const parse = (text: string): Config => parseConfig(text, { env: {}, cwd: dir });
const BASE = `model: {model_path: /m, max_model_len: 64, dtype: float32}
buffer:
  batch_size: 2
  explorer_input:
    taskset: {path: /t}
`;
const settingsOf = (extra: string) => {
  const [stage] = resolveStages(parse(`${BASE}${extra}`));
  assert.ok(stage);
  return stageSettings(stage, '/m');
};
function problems(text: string): string[] {
  try {
    parse(`${BASE}${text}`);
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    return error.problems.map((p) => `${p.path}: ${p.message}`);
  }
  assert.fail('expected a ConfigError');
}
const gpus = torch.cuda.deviceCount();

describe('resolveDevice', () => {
  it('auto is the CPU without a GPU, a rank own GPU (LOCAL_RANK) with them', () => {
    assert.equal(torch.resolveDevice('auto', { key: 'k', cudaDevices: 0 }), 'cpu');
    assert.equal(torch.resolveDevice('auto', { key: 'k', cudaDevices: 2, localRank: 1 }), 'cuda:1');
    assert.equal(torch.resolveDevice('cuda', { key: 'k', cudaDevices: 2 }), 'cuda:0');
    assert.equal(torch.resolveDevice('cuda:1', { key: 'k', cudaDevices: 2, localRank: 0 }), 'cuda:1');
    assert.equal(torch.resolveDevice('cpu', { key: 'k', cudaDevices: 2 }), 'cpu');
  });
  it('a GPU that is not there is an error naming the setting', () => {
    assert.throws(
      () => torch.resolveDevice('cuda', { key: 'trainer.device', cudaDevices: 0 }),
      /^Error: trainer\.device is 'cuda', but no CUDA device is visible/,
    );
    assert.throws(
      () => torch.resolveDevice('cuda:2', { key: 'trainer.device', cudaDevices: 2 }),
      /trainer\.device is 'cuda:2': it needs GPU 2, but only 2 CUDA device\(s\) are visible/,
    );
    assert.throws(
      () => torch.resolveDevice('auto', { key: 'trainer.device', cudaDevices: 1, localRank: 1 }),
      /it needs GPU 1 \(local rank 1\)/,
    );
  });
});

describe('trainer.device and explorer.rollout_model.device', () => {
  it(`default auto: ${gpus > 0 ? 'cuda:0 (this machine has a GPU)' : 'cpu (this machine has no GPU)'}`, () => {
    const s = settingsOf('');
    const expected = gpus > 0 ? 'cuda:0' : 'cpu';
    assert.equal(s.trainer.device, expected);
    assert.equal(s.explorer.device, expected);
  });
  it('cpu is the CPU', () => {
    const s = settingsOf('trainer: {device: cpu}\nexplorer: {rollout_model: {device: cpu}}\n');
    assert.equal(s.trainer.device, 'cpu');
    assert.equal(s.explorer.device, 'cpu');
  });
  it('cuda on a machine without a GPU: an error naming the key (skipped where a GPU is visible)', {
    skip: gpus > 0 ? 'this machine has a GPU' : false,
  }, () => {
    assert.throws(
      () => settingsOf('trainer: {device: cuda}\n'),
      /^Error: trainer\.device is 'cuda', but no CUDA device is visible/,
    );
    assert.throws(
      () => settingsOf('explorer: {rollout_model: {device: "cuda:1"}}\n'),
      /^Error: explorer\.rollout_model\.device is 'cuda:1', but no CUDA device is visible/,
    );
  });
  it('a value that is not a device is a config problem naming the key', () => {
    assert.deepEqual(problems('trainer: {device: gpu}\n'), ['trainer.device: expected a device: auto, cpu, cuda or cuda:N']);
  });
  it('an external server has no device here', () => {
    const extra =
      'explorer: {rollout_model: {engine_type: openai, base_url: "http://x", device: cpu}}\nsynchronizer: {sync_method: checkpoint}\n';
    assert.ok(problems(extra).some((p) => p.startsWith('explorer.rollout_model.device: places the embedded engine')));
  });
});

describe('mode colocate (Trinity: mode both on one GPU, sync in memory)', () => {
  it('is mode both with weights in memory, and one device for both parts', () => {
    const config = parse(`${BASE}mode: colocate\ntrainer: {device: cpu}\n`);
    assert.equal(config.mode, 'both');
    assert.equal(config.synchronizer.sync_method, 'memory');
    assert.equal(config.trainer.device, 'cpu');
    assert.equal(config.explorer.rollout_model.device, 'cpu', "the explorer takes the trainer's device");
  });
  it('refuses checkpoint sync and two different devices', () => {
    assert.ok(
      problems('mode: colocate\nsynchronizer: {sync_method: checkpoint}\n').some((p) =>
        p.startsWith('synchronizer.sync_method: mode colocate syncs weights in memory'),
      ),
    );
    assert.ok(
      problems('mode: colocate\ntrainer: {device: "cuda:0"}\nexplorer: {rollout_model: {device: cpu}}\n').some((p) =>
        p.startsWith("explorer.rollout_model.device: mode colocate puts the explorer and the trainer on one device: it is 'cpu'"),
      ),
    );
  });
});

describe('placement line', () => {
  it('names the device of each part and how weights move', () => {
    assert.equal(
      describePlacement(settingsOf('trainer: {device: cpu}\nexplorer: {rollout_model: {device: cpu}}\n')),
      'placement: trainer on cpu (float32); rollout engine on cpu (float32); weights in memory, on the same device (cpu, one process)',
    );
    const s = settingsOf('trainer: {device: cpu}\nexplorer: {rollout_model: {device: cpu}}\n');
    const split = { ...s, trainer: { ...s.trainer, device: 'cuda:0' }, explorer: { ...s.explorer, device: 'cuda:1' } };
    assert.equal(
      describePlacement(split),
      'placement: trainer on cuda:0 (float32); rollout engine on cuda:1 (float32); weights in memory, copied cuda:0 -> cuda:1',
    );
    const [mixedStage] = resolveStages(parse(`${BASE.replace('dtype: float32', 'dtype: bfloat16')}trainer: {device: cpu}\n`));
    assert.ok(mixedStage);
    const mixed = stageSettings(mixedStage, '/m');
    assert.match(
      describePlacement(mixed),
      /^placement: trainer on cpu \(bfloat16 compute, float32 master weights\); rollout engine on /,
    );
    const [trainStage] = resolveStages(
      parse(
        'model: {model_path: /m, max_model_len: 64, dtype: float32}\nmode: train\nalgorithm: {algorithm_type: sft}\n' +
          'buffer: {batch_size: 2, train_batch_size: 2, trainer_input: {experience_buffer: {storage_type: file, path: /d}}}\n',
      ),
    );
    assert.ok(trainStage);
    const train = stageSettings(trainStage, '/m');
    assert.equal(describePlacement(train), `placement: trainer on ${gpus > 0 ? 'cuda:0' : 'cpu'} (float32)`);
  });
  it('names the rollout engines: a pool on threads or in processes, one external server, an external pool', () => {
    const cpu = 'trainer: {device: cpu}\n';
    assert.equal(
      describePlacement(settingsOf(`${cpu}explorer: {rollout_model: {device: cpu, engine_num: 2}}\n`)),
      'placement: trainer on cpu (float32); rollout engines: 2 on threads on cpu (float32); weights in memory, on the ' +
        'same device (cpu, one process)',
    );
    assert.equal(
      describePlacement(
        settingsOf(
          `${cpu}synchronizer: {sync_method: checkpoint}\nexplorer: {rollout_model: {device: cpu, engine_num: 2, engine_process: true}}\n`,
        ),
      ),
      'placement: trainer on cpu (float32); rollout engines: 2 processes on cpu (float32); weights through checkpoint folders',
    );
    assert.equal(
      describePlacement(
        settingsOf(`${cpu}explorer: {rollout_model: {engine_type: openai, model_name: m, base_url: http://a/v1}}\n`),
      ),
      'placement: trainer on cpu (float32); rollout engine: external server http://a/v1',
    );
    assert.equal(
      describePlacement(
        settingsOf(
          `${cpu}explorer: {rollout_model: {engine_type: openai, model_name: m, base_url: [http://a/v1, http://b/v1]}}\n`,
        ),
      ),
      'placement: trainer on cpu (float32); rollout engines: external pool of 2 servers (http://a/v1, http://b/v1)',
    );
  });
  it('trinity run prints it: a colocate run of one step on this machine', async () => {
    const { configFile } = makeJob({ totalSteps: 1, saveInterval: 1 });
    const config = loadConfig(configFile, { resolveAlgorithm, overrides: ['mode=colocate'] });
    const lines: string[] = [];
    await runConfig(config, { log: (l) => lines.push(l) });
    const device = gpus > 0 ? 'cuda:0' : 'cpu';
    assert.ok(
      lines.includes(
        `[run] placement: trainer on ${device} (float32); rollout engine on ${device} (float32); weights in memory, ` +
          `on the same device (${device}, one process)`,
      ),
      lines.join('\n'),
    );
  });
});
