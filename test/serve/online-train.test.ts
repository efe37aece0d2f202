// The train side of a serve run without an end step: mode train over the shared buffer with no buffer.total_steps
// trains a step per train_batch_size experiences as agents' feedback comes, publishes weights the serving side loads,
// and ends when the serving side stops (it finished writing) with a checkpoint of its last step and no done.json (the
// same command trains on); stopped (Ctrl-C) while it waits for traffic, it ends at once; a learning-rate schedule that
// needs an end step is refused naming the key.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { loadConfig, resolveStages } from '../../src/rft/run/config/index.js';
import { runConfig, stageSettings } from '../../src/rft/run/index.js';
import { startServeStage } from '../../src/serve/index.js';
import { makeJob } from '../rft/run/helpers.js';

const shared = [
  'buffer.trainer_input.experience_buffer.storage_type=sql',
  'buffer.total_steps=null',
  'buffer.train_batch_size=2',
  'synchronizer.sync_method=checkpoint',
  'explorer.proxy_port=0',
  'trainer.save_interval=100',
];

/** A line of `lines` matching `pattern`, as an event: resolves when one is logged. */
function logWatch() {
  const waiting: { pattern: RegExp; resolve: () => void }[] = [];
  const lines: string[] = [];
  return {
    lines,
    log: (line: string) => {
      lines.push(line);
      for (const w of waiting.filter((w) => w.pattern.test(line))) w.resolve();
    },
    next: (pattern: RegExp) =>
      new Promise<void>((resolve) => {
        if (lines.some((l) => pattern.test(l))) resolve();
        else waiting.push({ pattern, resolve });
      }),
  };
}

describe('online training (mode train over the shared buffer, no total_steps)', () => {
  it('trains as feedback comes, and ends with a checkpoint when the serving side stops', { timeout: 240_000 }, async () => {
    const job = makeJob({ totalSteps: 1, saveInterval: 1 });
    const [serveConfig] = resolveStages(loadConfig(job.configFile, { resolveAlgorithm, overrides: ['mode=serve', ...shared] }));
    assert.ok(serveConfig);
    const served = logWatch();
    const stage = await startServeStage(stageSettings(serveConfig, join(job.root, 'model'), job.root), { log: served.log });
    const trained = logWatch();
    const training = runConfig(loadConfig(job.configFile, { resolveAlgorithm, overrides: ['mode=train', ...shared] }), {
      log: trained.log,
    });
    const agent = async (content: string, reward: number) => {
      const headers = { 'content-type': 'application/json' };
      const post = async (path: string, body: unknown) =>
        (await (await fetch(`${stage.server.url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) })).json()) as {
          id: string;
        };
      const reply = await post('/v1/chat/completions', { model: 'agent', messages: [{ role: 'user', content }], seed: 1 });
      await post('/feedback', { response_id: reply.id, reward, task_id: content });
    };
    try {
      await agent('1+1=', 1);
      await agent('1+1=', 0);
      await served.next(/now serving weights version 1 /);
      await agent('2+2=', 0);
      await agent('2+2=', 1);
      await served.next(/now serving weights version 2 /);
    } finally {
      await stage.stop(); // the serving side ends: the train side drains the buffer and ends
    }
    const result = await training;
    assert.deepEqual(
      result.stages.map((s) => s.steps),
      [2],
    );
    // save_interval 100: the checkpoint of step 2 is the one written as the stage ended
    assert.ok(existsSync(join(job.jobDir, 'checkpoints', 'global_step_2')));
    assert.ok(
      trained.lines.some((l) => /buffer finished: trained to step 2 .*run the same command to train on/.test(l)),
      trained.lines.join('\n'),
    );
    assert.equal(existsSync(join(job.jobDir, 'done.json')), false, 'not done: the same command trains on');
    assert.ok(result.finalModelDir !== null && existsSync(join(result.finalModelDir, 'model.safetensors')));
  });

  it('stops at once when stopped while it waits for traffic', { timeout: 120_000 }, async () => {
    const job = makeJob({ totalSteps: 1, saveInterval: 1 });
    const stop = new AbortController();
    const trained = logWatch();
    const training = runConfig(loadConfig(job.configFile, { resolveAlgorithm, overrides: ['mode=train', ...shared] }), {
      log: trained.log,
      signal: stop.signal,
    });
    await trained.next(/placement: trainer/);
    stop.abort();
    const result = await training; // without the signal the read would wait max_read_timeout (1800 s)
    assert.deepEqual(result.stages, []);
    assert.ok(trained.lines.some((l) => /stopped; run the same command to resume/.test(l)));
  });

  it('refuses a learning-rate schedule that decays towards an end step, naming the key', { timeout: 120_000 }, async () => {
    const job = makeJob({ totalSteps: 1, saveInterval: 1 });
    const config = loadConfig(job.configFile, {
      resolveAlgorithm,
      overrides: ['mode=train', ...shared, 'algorithm.optimizer.lr_scheduler_type=cosine'],
    });
    await assert.rejects(runConfig(config, { log: () => {} }), /lr_scheduler_type 'cosine' decays towards the last step/);
  });
});
