// The engine-pool keys in a config: explorer.rollout_model.engine_num (embedded engines, or one per base_url of an
// external pool), engine_process, and base_url as a list; what they resolve to, and the precise problems of
// combinations that cannot work.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { ConfigError, loadConfig, resolveStages } from '../../../src/rft/run/config/index.js';
import { stageSettings } from '../../../src/rft/run/index.js';

const dir = mkdtempSync(join(tmpdir(), 'engine-pool-config-'));
let files = 0;

const BASE = `model: {model_path: /m, max_model_len: 64}
buffer: {explorer_input: {taskset: {path: /t}}, trainer_input: {experience_buffer: {storage_type: sql}}}
`;

/** The first stage's settings of a valid config. */
const settingsOf = (text: string) => stageSettings(resolveStages(load(text))[0] as never, '/m');

function load(text: string) {
  const file = join(dir, `c${files++}.yaml`);
  writeFileSync(file, BASE + text);
  return loadConfig(file, { env: {}, cwd: dir });
}

/** The problems of an invalid config, without their sources. */
function problems(text: string): string[] {
  try {
    load(text);
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    return error.message
      .split('\n')
      .slice(1)
      .map((line) => line.replace(/^ {2}- /, '').replace(/ \(\/[^()]*\)$/, ''));
  }
  assert.fail('expected a ConfigError');
}

describe('engine pool settings', () => {
  it('engine_num 2 embedded: two engines, weights in memory; engine_process: weights by checkpoint', () => {
    const threads = settingsOf('explorer: {rollout_model: {engine_num: 2}}\n');
    assert.deepEqual(threads.explorer.engine, {
      type: 'embedded',
      weightSync: 'memory',
      engineNum: 2,
      engineProcess: false,
      prefixCaching: false,
      prefill: { chunkedPrefill: false },
      weightSyncBufferBytes: 1024 * 1024 * 1024, // Trinity's weight_sync_buffer_size default, 1024 MB
    });
    const processes = settingsOf('explorer: {rollout_model: {engine_num: 2, engine_process: true}}\n');
    assert.deepEqual(processes.explorer.engine, {
      type: 'embedded',
      weightSync: 'checkpoint',
      engineNum: 2,
      engineProcess: true,
      prefixCaching: false,
      prefill: { chunkedPrefill: false },
      weightSyncBufferBytes: 1024 * 1024 * 1024,
    });
  });

  it('weight_sync_buffer_size: MB an embedded engine reads of a weights folder at a time; refused for a server', () => {
    const settings = settingsOf('explorer: {rollout_model: {weight_sync_buffer_size: 64}}\n');
    assert.equal(
      settings.explorer.engine.type === 'embedded' && settings.explorer.engine.weightSyncBufferBytes,
      64 * 1024 * 1024,
    );
    assert.deepEqual(
      problems('explorer: {rollout_model: {engine_type: openai, base_url: http://a/v1, weight_sync_buffer_size: 64}}\n'),
      [
        'explorer.rollout_model.weight_sync_buffer_size: sizes how an embedded engine loads a weights folder; an external server (engine_type openai) loads it itself: remove it',
      ],
    );
    assert.match(problems('explorer: {rollout_model: {weight_sync_buffer_size: 0}}\n')[0] as string, /weight_sync_buffer_size/);
  });

  it('a base_url list is an external pool; engine_num may be left out or equal its length', () => {
    const settings = settingsOf(
      'explorer: {rollout_model: {engine_type: openai, engine_num: 2, model_name: m, base_url: [http://a/v1, http://b/v1]}}\n',
    );
    assert.deepEqual(settings.explorer.engine, {
      type: 'openai',
      baseUrl: ['http://a/v1', 'http://b/v1'],
      apiKey: null,
      modelName: 'm',
    });
  });

  it('names what cannot work', () => {
    assert.deepEqual(
      problems('explorer: {rollout_model: {engine_type: openai, engine_num: 3, base_url: [http://a/v1, http://a/v1]}}\n'),
      [
        'explorer.rollout_model.engine_num: (3) an external pool has one engine per base_url (2 given): list the servers in base_url, and set engine_num to their number or leave it out',
        'explorer.rollout_model.base_url: lists a server twice: each base_url is one server of the pool',
      ],
    );
    assert.deepEqual(
      problems('explorer: {rollout_model: {engine_type: openai, engine_process: true, base_url: http://a/v1}}\n'),
      ["explorer.rollout_model.engine_process: starts embedded engines in processes of their own: use engine_type 'embedded'"],
    );
    assert.deepEqual(problems('synchronizer: {sync_method: memory}\nexplorer: {rollout_model: {engine_process: true}}\n'), [
      "synchronizer.sync_method: 'memory' cannot reach engines in other processes (explorer.rollout_model.engine_process): use 'checkpoint' (each engine process reloads from disk)",
    ]);
    assert.deepEqual(problems('mode: colocate\nexplorer: {rollout_model: {engine_process: true}}\n'), [
      "explorer.rollout_model.engine_process: mode colocate runs the engine in the trainer's process: remove it",
    ]);
    assert.deepEqual(problems('mode: serve\nexplorer: {rollout_model: {engine_process: true}}\n'), [
      'explorer.rollout_model.engine_process: mode serve runs its engines on threads of its own process: remove it',
    ]);
    assert.match(
      problems('explorer: {rollout_model: {engine_num: 65}}\n')[0] as string,
      /^explorer\.rollout_model\.engine_num: /,
    );
  });
});
