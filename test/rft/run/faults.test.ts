// A real `trinity run` whose workflow (a module path, so it runs on workflow worker threads) randomly — seeded by the
// attempt's seed — throws, hangs asynchronously, hangs in a synchronous loop, returns garbage, leaves a promise
// rejection unhandled or throws inside a setTimeout: the run finishes, every fault is counted in the step metrics
// (rollout/attempts/{timed_out,errored,malformed,retried}), and every step trains on exactly the experiences its
// successful attempts produced. And SIGTERM ends a run whose workflow is stuck in a synchronous loop, cleanly: exit
// code 143, its checkpoints intact, the same command resumes it.
//
// Ground truth comes from the workflow itself: before acting, each attempt appends what it will do to attempts.jsonl
// (a synchronous write, so a fault that never returns is recorded too). A run's last attempt (the third: retries 2)
// never faults, so no step is short and the counts are exact. A hang ends only by explorer.max_timeout; it is far
// above what a 4-token generation takes, and no assertion depends on how long anything took.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { listCheckpoints } from '../../../src/rft/checkpoint.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

const FAULTS = ['throw', 'hang-async', 'hang-sync', 'garbage', 'reject', 'timer-throw', 'ok'] as const;
type Fault = (typeof FAULTS)[number];
const MAX_RETRY_TIMES = 2;

const WORKFLOW = `import { appendFileSync, existsSync, readFileSync } from 'node:fs';

const log = new URL('./attempts.jsonl', import.meta.url);
const spinFlag = new URL('./spin', import.meta.url);
const FAULTS = ${JSON.stringify(FAULTS)};

async function sample({ task, model, seed }) {
  const { completions } = await model.generate({ prompt: task.prompt, maxTokens: 4, temperature: 1, seed });
  return completions.map((c) => model.toExperience(c, { reward: c.text.trim() === task.response ? 1 : 0 }));
}

export const faulty = {
  repeatable: false,
  run: async (context) => {
    const key = context.task.id + '/' + context.runIdBase;
    const earlier = existsSync(log)
      ? readFileSync(log, 'utf8').split('\\n').filter((l) => l && JSON.parse(l).key === key).length
      : 0;
    const fault = earlier < ${MAX_RETRY_TIMES} ? FAULTS[context.seed % FAULTS.length] : 'ok';
    const record = (extra) => appendFileSync(log, JSON.stringify({ key, attempt: earlier, fault, ...extra }) + '\\n');
    if (fault !== 'ok') record({});
    const never = () => new Promise(() => {});
    switch (fault) {
      case 'throw':
        throw new Error('the workflow threw');
      case 'hang-async':
        return never();
      case 'hang-sync':
        for (;;) {}
      case 'garbage':
        return [42, [], [{ tokens: 'nope', score: () => 1 }]][context.seed % 3];
      case 'reject':
        void Promise.reject(new Error('a rejection nobody handles'));
        return never();
      case 'timer-throw':
        setTimeout(() => {
          throw new Error('thrown in a timer');
        }, 0);
        return never();
    }
    const experiences = await sample(context);
    record({ experiences: experiences.length });
    return experiences;
  },
};

/** Samples normally, or — once the file ./spin exists — announces itself and loops forever. */
export const spinWhenFlagged = {
  repeatable: false,
  run: async (context) => {
    if (existsSync(spinFlag)) {
      console.log('spinning in task ' + context.task.id);
      for (;;) {}
    }
    return sample(context);
  },
};
`;

interface RunOutput {
  code: number | null;
  signal: NodeJS.Signals | null;
  output: string;
}

/** Runs `trinity run`; `on` reacts to the output as it comes (an event the run reports), with the child process. */
function run(configFile: string, args: string[], on?: (output: string, kill: (s: NodeJS.Signals) => void) => void) {
  return new Promise<RunOutput>((resolve, reject) => {
    const child = spawn(process.execPath, [trinity, 'run', '--config', configFile, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    const take = (d: Buffer) => {
      output += d;
      on?.(output, (s) => child.kill(s));
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    const deadline = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`trinity run did not finish within 400 s:\n${output}`));
    }, 400_000);
    child.on('exit', (code, signal) => {
      clearTimeout(deadline);
      resolve({ code, signal, output });
    });
  });
}

const metricLines = (jobDir: string): Record<string, number>[] =>
  readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Record<string, number>);

/** The metrics of each step, merged (explorer and trainer lines). */
function stepMetrics(jobDir: string): Map<number, Record<string, number>> {
  const steps = new Map<number, Record<string, number>>();
  for (const line of metricLines(jobDir)) steps.set(line.step as number, { ...steps.get(line.step as number), ...line });
  return steps;
}

test('faulty workflows: every throw, hang (async and sync), garbage result, stray rejection and timer throw is counted; no experience lost or duplicated', {
  timeout: 600_000,
}, async () => {
  const totalSteps = 4;
  const { root, configFile, jobDir } = makeJob({ totalSteps, saveInterval: 2 });
  writeFileSync(join(root, 'faulty.mts'), WORKFLOW);
  const result = await run(configFile, [
    '--set',
    'buffer.explorer_input.default_workflow_type=faulty.mts#faulty',
    '--set',
    'explorer.max_timeout=5',
    '--set',
    `explorer.max_retry_times=${MAX_RETRY_TIMES}`,
  ]);
  assert.equal(result.code, 0, result.output);

  const attempts = readFileSync(join(root, 'attempts.jsonl'), 'utf8')
    .split('\n')
    .filter((l) => l)
    .map((l) => JSON.parse(l) as { key: string; attempt: number; fault: Fault; experiences?: number });
  const count = (...faults: Fault[]) => attempts.filter((a) => faults.includes(a.fault)).length;
  // the seeds of this config draw every kind of fault (the run is deterministic: seeds come from the config's seed)
  for (const fault of FAULTS) assert.ok(count(fault) > 0, `no attempt drew '${fault}': ${JSON.stringify(attempts)}`);

  const steps = stepMetrics(jobDir);
  assert.deepEqual([...steps.keys()], [1, 2, 3, 4]);
  const sum = (key: string) => [...steps.values()].reduce((a, m) => a + (m[key] ?? Number.NaN), 0);
  assert.equal(sum('rollout/attempts/timed_out'), count('hang-async', 'hang-sync'), 'every hang timed out');
  assert.equal(sum('rollout/attempts/errored'), count('throw', 'reject', 'timer-throw'), 'every throw and stray error');
  assert.equal(sum('rollout/attempts/malformed'), count('garbage'), 'every garbage result');
  assert.equal(sum('rollout/attempts/retried'), attempts.length - count('ok'), 'each fault was retried');
  // 2 tasks × repeat_times 4 non-repeatable runs per step, each ends with one successful attempt of one experience
  const produced = attempts.filter((a) => a.fault === 'ok').reduce((a, x) => a + (x.experiences as number), 0);
  assert.equal(produced, totalSteps * 8);
  for (const [step, m] of steps) {
    assert.equal(m['rollout/runs/ok'], 8, `step ${step}`);
    assert.equal(m['rollout/runs/failed'], 0, `step ${step}`);
    assert.equal(m['rollout/experiences'], 8, `step ${step}: experiences explored`);
    assert.equal(m['sample/count'], 8, `step ${step}: experiences trained`);
  }
  assert.ok(existsSync(join(jobDir, 'final_model', 'model.safetensors')));
});

test('SIGTERM ends a run whose workflow is stuck in a synchronous loop: exit 143, checkpoints intact, the same command resumes', {
  timeout: 600_000,
}, async () => {
  const totalSteps = 6;
  const { root, configFile, jobDir } = makeJob({ totalSteps, saveInterval: 2 });
  writeFileSync(join(root, 'faulty.mts'), WORKFLOW);
  const args = ['--set', 'buffer.explorer_input.default_workflow_type=faulty.mts#spinWhenFlagged'];
  let flagged = false;
  let sent = false;
  const first = await run(configFile, [...args, '--set', 'explorer.max_timeout=3600'], (output, kill) => {
    // from the first checkpoint on, every new attempt spins; the first one to spin gets the run SIGTERM'd
    if (!flagged && /checkpoint step 2 saved/.test(output)) {
      flagged = true;
      writeFileSync(join(root, 'spin'), '');
    }
    if (flagged && !sent && /spinning in task/.test(output)) {
      sent = true;
      kill('SIGTERM');
    }
  });
  assert.equal(first.code, 143, `SIGTERM should stop the run with 143:\n${first.output}`);
  assert.match(first.output, /stopping after the current step/);
  assert.match(first.output, /stopped; run the same command to resume/);
  const saved = listCheckpoints(jobDir);
  assert.ok(saved.length > 0 && (saved.at(-1) as number) < totalSteps, `checkpoints: ${saved}`);
  // what the run recorded for whoever watches the folder (the Studio): stopped, not crashed
  const status = () => JSON.parse(readFileSync(join(jobDir, 'run_status.json'), 'utf8')) as { state: string };
  assert.equal(status().state, 'interrupted');

  rmSync(join(root, 'spin'));
  const second = await run(configFile, args);
  assert.equal(second.code, 0, second.output);
  assert.match(second.output, new RegExp(`resuming from checkpoint step ${saved.at(-1)} `));
  assert.deepEqual(
    [...stepMetrics(jobDir).keys()],
    Array.from({ length: totalSteps }, (_, i) => i + 1),
  );
  assert.ok(existsSync(join(jobDir, 'final_model', 'model.safetensors')));
  assert.equal(status().state, 'finished');
});
