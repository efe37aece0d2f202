import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { reportCommand } from '../../../src/cli/report-command.js';
import {
  buildReport,
  compareSamples,
  evalProgression,
  findStageDirs,
  formatSummaryTable,
  formatTick,
  niceDomain,
  type ReportData,
  type StageSummary,
  readRun,
  summarizeRun,
  writeReport,
} from '../../../src/rft/report/index.js';

// A two-stage job (sft, then grpo) as `trinity run` leaves it: one folder per stage with metrics.jsonl; grpo also
// has eval lines (steps 0, 2, 4) and eval_samples.jsonl. Values with many digits check that nothing is rounded.
const SFT = [
  { step: 1, time: 1000.5, 'actor/loss': 2.0794415416798357, 'actor/grad_norm': 1.5, 'actor/lr': 1e-5, 'time/train_s': 0.25 },
  { step: 2, time: 1001.5, 'actor/loss': 1.7320508075688772, 'actor/grad_norm': 1.25, 'actor/lr': 1e-5, 'time/train_s': 0.25 },
  { step: 3, time: 1002.5, 'actor/loss': 1.3862943611198906, 'actor/grad_norm': 1.125, 'actor/lr': 1e-5, 'time/train_s': 0.25 },
];
const train = (step: number, reward: number, std: number, kl: number | null) => ({
  step,
  time: 2000 + step,
  'rollout/reward/mean': reward,
  'rollout/reward/std': std,
  'rollout/response_length/mean': 10 + step * 0.5,
  'actor/loss': -0.01 * step,
  'actor/pg_loss': -0.011 * step,
  ...(kl === null ? {} : { 'actor/kl': kl }),
  'actor/entropy': 1.2 - 0.1 * step,
  'actor/grad_norm': 0.5,
  'actor/lr': 1e-6,
  'time/train_s': 1.5,
});
const GRPO = [
  { step: 0, time: 1999, 'eval/math/mean@4': 0.25, 'eval/math/pass@4': 0.5 },
  train(1, 0.1, 0.3, 0.001),
  train(2, 0.25, 0.4330127018922193, 0.0023456789012345678),
  { step: 2, time: 2002.5, 'eval/math/mean@4': 0.4166666666666667, 'eval/math/pass@4': 0.6666666666666666 },
  train(3, 0.4, 0.4898979485566356, null), // a line without actor/kl
  train(4, 0.6, 0.4898979485566356, 0.0031),
  { step: 4, time: 2004.5, 'eval/math/mean@4': 0.625, 'eval/math/pass@4': 0.75 },
];
const sample = (step: number, taskId: string, response: string, reward: number) => ({
  step,
  taskset: 'math',
  taskId,
  prompt: `What is ${taskId}? <b>&</b>`,
  response,
  reference: `ref ${taskId}`,
  reward,
});
const SAMPLES = [
  sample(0, '1+1', 'three', 0),
  sample(0, '2+2', '4', 1),
  sample(0, '3+3', 'seven', 0),
  sample(4, '1+1', '2', 1),
  sample(4, '2+2', '4', 1),
  sample(4, '3+3', 'five', 0),
];

const jsonl = (rows: readonly object[]) => rows.map((r) => JSON.stringify(r)).join('\n') + '\n';

function makeJob(options: { stagesJson?: string[] } = {}): string {
  const job = mkdtempSync(join(tmpdir(), 'rft-report-'));
  mkdirSync(join(job, 'sft'));
  mkdirSync(join(job, 'grpo', 'checkpoints'), { recursive: true });
  writeFileSync(join(job, 'sft', 'metrics.jsonl'), jsonl(SFT));
  writeFileSync(join(job, 'grpo', 'metrics.jsonl'), jsonl(GRPO));
  writeFileSync(join(job, 'grpo', 'eval_samples.jsonl'), jsonl(SAMPLES));
  if (options.stagesJson) writeFileSync(join(job, 'stages.json'), JSON.stringify(options.stagesJson));
  return job;
}

function reportData(html: string): ReportData {
  const match = /<script type="application\/json" id="report-data">([\s\S]*?)<\/script>/.exec(html);
  assert.ok(match, 'the report embeds its data');
  return JSON.parse(match[1] as string) as ReportData;
}

/** Every chart's <polyline>s mapped back to values with the chart's data-x-domain, data-y-domain and data-plot. */
function drawnLines(
  html: string,
): Map<string, { key: string; stage: string; points: [number, number][]; tol: [number, number] }[]> {
  const out = new Map<string, { key: string; stage: string; points: [number, number][]; tol: [number, number] }[]>();
  for (const svg of html.matchAll(/<svg [^>]*id="chart-([^"]+)"[^>]*>[\s\S]*?<\/svg>/g)) {
    const attr = (name: string) => (new RegExp(`${name}="([^"]+)"`).exec(svg[0])?.[1] ?? '').split(' ').map(Number);
    const [x0, x1] = attr('data-x-domain') as [number, number];
    const [y0, y1] = attr('data-y-domain') as [number, number];
    const [left, top, width, height] = attr('data-plot') as [number, number, number, number];
    const lines = [...svg[0].matchAll(/<polyline data-key="([^"]+)" data-stage="([^"]+)" points="([^"]+)"/g)].map((m) => ({
      key: m[1] as string,
      stage: m[2] as string,
      points: (m[3] as string).split(' ').map((p) => {
        const [px, py] = p.split(',').map(Number) as [number, number];
        return [x0 + ((px - left) / width) * (x1 - x0), y0 + ((top + height - py) / height) * (y1 - y0)] as [number, number];
      }),
      // pixels are rounded to 0.01: half of that, in data units
      tol: [(0.005 / width) * (x1 - x0) * 1.01, (0.005 / height) * (y1 - y0) * 1.01] as [number, number],
    }));
    out.set(svg[1] as string, lines);
  }
  return out;
}

test('report: the HTML holds the charts, the samples table and exactly the JSONL values', async () => {
  const job = makeJob();
  const { file } = await writeReport(job, { title: 'GSM8K: SFT then GRPO' });
  assert.equal(file, join(job, 'report.html'));
  const html = readFileSync(file, 'utf8');
  assert.match(html, /<title>GSM8K: SFT then GRPO<\/title>/);
  assert.doesNotMatch(html, /<script(?! type="application\/json")/, 'no executable scripts');
  assert.doesNotMatch(html, /(src|href)="https?:/, 'nothing fetched');

  // the embedded lines equal the files' lines, to the last digit (stages in time order: sft, then grpo)
  const data = reportData(html);
  assert.deepEqual(
    data.stages.map((s) => [s.name, s.offset]),
    [
      ['sft', 0],
      ['grpo', 3],
    ],
  );
  for (const stage of data.stages) {
    const lines = readFileSync(join(job, stage.name, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n');
    assert.deepEqual(
      stage.rows,
      lines.map((l) => JSON.parse(l)),
    );
  }

  // every chart point is a value of metrics.jsonl at that step (x = stage offset + step)
  const ids = data.charts.map((c) => c.id);
  assert.deepEqual(ids, ['reward', 'eval-math', 'response-length', 'kl', 'entropy', 'loss', 'grad-norm', 'lr']);
  const files = { sft: SFT as Record<string, number>[], grpo: GRPO as Record<string, number>[] };
  for (const chart of data.charts)
    for (const series of chart.series) {
      const offset = data.stages.find((s) => s.name === series.stage)?.offset ?? Number.NaN;
      const expected = files[series.stage as 'sft' | 'grpo']
        .filter((row) => series.key in row)
        .map((row) => [offset + (row.step as number), row[series.key]]);
      assert.deepEqual(series.points, expected, `${chart.id}: ${series.key} of ${series.stage}`);
    }
  const loss = data.charts.find((c) => c.id === 'loss');
  assert.deepEqual(
    loss?.series.map((s) => [s.key, s.stage]),
    [
      ['actor/loss', 'sft'],
      ['actor/loss', 'grpo'],
      ['actor/pg_loss', 'grpo'],
    ],
  );
  const kl = data.charts.find((c) => c.id === 'kl')?.series[0];
  assert.deepEqual(kl?.points, [
    [4, 0.001],
    [5, 0.0023456789012345678],
    [7, 0.0031],
  ]);

  // and the SVG lines are drawn from those points
  const drawn = drawnLines(html);
  assert.deepEqual([...drawn.keys()], ids);
  for (const chart of data.charts) {
    const lines = drawn.get(chart.id) ?? [];
    assert.equal(lines.length, chart.series.length, chart.id);
    chart.series.forEach((series, i) => {
      const line = lines[i];
      assert.ok(line);
      assert.equal(line.key, series.key);
      assert.equal(line.stage, series.stage);
      assert.equal(line.points.length, series.points.length);
      series.points.forEach(([x, y], j) => {
        const [dx, dy] = line.points[j] as [number, number];
        assert.ok(Math.abs(dx - x) <= line.tol[0], `${chart.id} ${series.key} x ${dx} vs ${x}`);
        assert.ok(Math.abs(dy - y) <= line.tol[1], `${chart.id} ${series.key} y ${dy} vs ${y}`);
      });
    });
  }
  // readable: a std band, axis labels, a legend entry per line and the boundary between the stages
  assert.match(html, /<polygon class="band" data-stage="grpo"/);
  assert.match(html, />step: sft 0–3 · grpo 3–7 \(dashed line: next stage\)<\/text>/);
  assert.equal((html.match(/class="stage-boundary"/g) ?? []).length, data.charts.length);
  assert.match(html, />eval\/math\/pass@4<\/text>/);

  // the samples table: before (grpo step 0) and after (grpo step 4), the changed problem first, text escaped
  assert.match(html, /<th>answer at grpo step 0<\/th><th>answer at grpo step 4<\/th>/);
  const samples = html.slice(html.indexOf('<table class="samples">'));
  assert.match(samples, /What is 1\+1\? &#60;b&#62;&#38;&#60;\/b&#62;/);
  assert.ok(samples.indexOf('1+1') < samples.indexOf('2+2') && samples.indexOf('2+2') < samples.indexOf('3+3'));
  assert.equal((samples.match(/✓ correct/g) ?? []).length, 3);
  assert.equal((samples.match(/✗ wrong/g) ?? []).length, 3);
});

test('report: summary values per stage (hand-computed) and the terminal table', async () => {
  const job = makeJob();
  const rows = await summarizeRun(job);
  assert.deepEqual(rows, [
    { stage: 'sft', steps: 3, lastStep: 3, rewardFirst: null, rewardLast: null, eval: {}, samples: 0 },
    {
      stage: 'grpo',
      steps: 4,
      lastStep: 4,
      rewardFirst: { step: 1, value: 0.1 },
      rewardLast: { step: 4, value: 0.6 },
      eval: {
        'eval/math/mean@4': { start: { step: 0, value: 0.25 }, end: { step: 4, value: 0.625 } },
        'eval/math/pass@4': { start: { step: 0, value: 0.5 }, end: { step: 4, value: 0.75 } },
      },
      samples: 6,
    },
  ]);
  assert.equal(
    formatSummaryTable(rows),
    [
      'stage  steps  reward first  reward last  math/mean@4 start → end  math/pass@4 start → end',
      'sft        3             —            —                        —                        —',
      'grpo       4         0.100        0.600            0.250 → 0.625            0.500 → 0.750',
      '',
      'math/mean@4: after sft 0.250 → after grpo 0.625',
      'math/pass@4: after sft 0.500 → after grpo 0.750',
      '',
    ].join('\n'),
  );
  const html = readFileSync((await writeReport(job)).file, 'utf8');
  assert.match(html, /<td>grpo<\/td><td>4<\/td><td>0.100<\/td><td>0.600<\/td><td>0.250 → 0.625<\/td>/);
  assert.match(html, /after sft <b>0.250<\/b> → after grpo <b>0.625<\/b>/);
});

test('report: stages.json fixes the stage order; a single-stage job folder works too', async () => {
  const job = makeJob({ stagesJson: ['grpo', 'sft'] });
  assert.deepEqual(
    (await readRun(job)).stages.map((s) => s.name),
    ['grpo', 'sft'],
  );
  const single = join(job, 'grpo');
  const run = await readRun(single);
  assert.deepEqual(
    run.stages.map((s) => s.name),
    ['grpo'],
  );
  // a single-stage run's stages.json names the job folder itself '.'; a bench folder below it is a stage of its own
  const withBench = makeJob();
  mkdirSync(join(withBench, 'grpo', 'bench'));
  writeFileSync(join(withBench, 'grpo', 'bench', 'metrics.jsonl'), jsonl([{ step: 0, time: 1, 'eval/math/mean@4': 0.25 }]));
  writeFileSync(join(withBench, 'grpo', 'stages.json'), '["."]\n');
  assert.deepEqual(
    (await readRun(join(withBench, 'grpo'))).stages.map((s) => [s.name, s.path]),
    [
      ['grpo', '.'],
      ['bench', 'bench'],
    ],
  );
  const { data, html } = buildReport(run);
  assert.equal(data.title, 'Run report: grpo');
  assert.doesNotMatch(html, /class="stage-boundary"/);
  assert.match(html, /<th>answer at step 0<\/th><th>answer at step 4<\/th>/);
  const comparison = compareSamples(run, 2);
  assert.deepEqual(
    comparison.rows.map((r) => [r.taskId, r.before?.correct, r.after?.correct]),
    [
      ['1+1', 0, 1],
      ['2+2', 1, 1],
    ],
  );
});

test('stage folders: a folder a running job replaces while it is listed is skipped; the job folder missing is an error', async () => {
  const job = makeJob({ stagesJson: ['grpo', 'sft'] });
  mkdirSync(join(job, 'final_model'));
  const gone = (dir: string) =>
    Object.assign(new Error(`ENOENT: no such file or directory, scandir '${dir}'`), { code: 'ENOENT' });
  // final_model is listed under the job, then replaced (removed) before it is read itself
  const racing = (dir: string) =>
    dir === join(job, 'final_model') ? Promise.reject(gone(dir)) : readdir(dir, { withFileTypes: true });
  assert.deepEqual(await findStageDirs(job, racing), [join(job, 'grpo'), join(job, 'sft')]);
  await assert.rejects(findStageDirs(join(job, 'no-such-run')), /ENOENT/);
  // any other failure is not hidden
  const denied = (dir: string) =>
    dir === join(job, 'final_model')
      ? Promise.reject(Object.assign(new Error('EACCES: permission denied'), { code: 'EACCES' }))
      : readdir(dir, { withFileTypes: true });
  await assert.rejects(findStageDirs(job, denied), /EACCES/);
});

test('report: missing keys, empty files and bad lines give clear messages', async () => {
  const job = mkdtempSync(join(tmpdir(), 'rft-report-'));
  await assert.rejects(readRun(job), /no metrics\.jsonl in .* or its subfolders \(two levels deep\)/);
  await assert.rejects(readRun(join(job, 'nope')), /no such job folder/);

  mkdirSync(join(job, 'a'));
  mkdirSync(join(job, 'b'));
  writeFileSync(join(job, 'a', 'metrics.jsonl'), '');
  writeFileSync(
    join(job, 'b', 'metrics.jsonl'),
    `${JSON.stringify({ step: 0, time: 5, 'eval/gsm8k/mean@1': 0.5 })}\n{"step": 1, "time": 6\n{"time": 7, "actor/loss": 1}\n`,
  );
  writeFileSync(join(job, 'stages.json'), '{"a": 1}');
  const run = await readRun(job);
  assert.deepEqual(
    run.warnings.map((w) => w.replace(job, 'JOB')),
    [
      'JOB/a/metrics.jsonl: no metrics lines (the stage wrote nothing yet)',
      `JOB/b/metrics.jsonl:2: not valid JSON (${(() => {
        try {
          JSON.parse('{"step": 1, "time": 6');
        } catch (error) {
          return (error as Error).message;
        }
      })()}): skipped`,
      'JOB/b/metrics.jsonl:3: no integer "step": skipped',
      'JOB/stages.json: not a JSON array of stage folder names: ignored',
    ],
  );
  const { data, html } = buildReport(run);
  assert.deepEqual(
    data.summary.map((r) => [r.stage, r.steps, r.rewardFirst]),
    [
      ['b', 0, null],
      ['a', 0, null],
    ],
  );
  assert.match(html, /While reading the run:/);
  assert.match(html, /no data: no metrics line has rollout\/reward\/mean/);
  assert.match(html, /no data: no metrics line has actor\/kl/);
  assert.match(html, /no data: no metrics line has actor\/loss or actor\/pg_loss/);
  assert.doesNotMatch(html, /id="chart-lr"/, 'optional charts without data are left out');
  assert.match(html, /No stage has eval_samples\.jsonl/);
  assert.equal(
    formatSummaryTable(data.summary),
    [
      'stage  steps  reward first  reward last  gsm8k/mean@1 start → end',
      'b          0             —            —                     0.500',
      'a          0             —            —                         —',
      '',
    ].join('\n'),
  );
});

test('report: eval progression labels: base → after each stage', () => {
  const stage = (name: string, lastStep: number, start: [number, number] | null, end: [number, number] | null): StageSummary => ({
    stage: name,
    steps: lastStep,
    lastStep,
    rewardFirst: null,
    rewardLast: null,
    eval:
      start && end
        ? { 'eval/m/mean@1': { start: { step: start[0], value: start[1] }, end: { step: end[0], value: end[1] } } }
        : {},
    samples: 0,
  });
  const rows = [stage('bench', 0, [0, 0.1], [0, 0.1]), stage('sft', 5, null, null), stage('grpo', 8, [0, 0.3], [6, 0.5])];
  assert.deepEqual(evalProgression(rows, 'eval/m/mean@1'), [
    { label: 'base', value: 0.1 },
    { label: 'after sft', value: 0.3 },
    { label: 'grpo step 6', value: 0.5 },
  ]);
  // two GRPO stages with evals at 0 and at their last step: the next stage's step-0 eval is "after a"
  const twice = [stage('a', 4, [0, 0.1], [4, 0.2]), stage('b', 4, [0, 0.25], [4, 0.4])];
  assert.deepEqual(
    evalProgression(twice, 'eval/m/mean@1').map((p) => `${p.label} ${p.value}`),
    ['base 0.1', 'a step 4 0.2', 'after a 0.25', 'after b 0.4'],
  );
});

test('report: axis ticks', () => {
  assert.deepEqual(niceDomain(0.1, 0.6), [0.1, 0.6]);
  assert.deepEqual(niceDomain(0.13, 0.58), [0.1, 0.6]);
  assert.deepEqual(niceDomain(2, 2), [1.8, 2.2]);
  assert.equal(formatTick(0.30000000000000004, 0.1), '0.3');
  assert.equal(formatTick(1.2e-6, 2e-7), '1.2e-6');
  assert.equal(formatTick(8e-6, 2e-6, 1e-5), '8.0e-6', 'one number of digits on an axis');
  assert.equal(formatTick(250, 50), '250');
});

test('trinity report writes the file and prints the summary', async () => {
  const job = makeJob();
  const out = join(job, 'out', 'r.html');
  const written: string[] = [];
  const errors: string[] = [];
  const io = { stdout: { write: (t: string) => written.push(t) }, stderr: { write: (t: string) => errors.push(t) } };
  const code = await reportCommand([job, '--out', out, '--title', 'T'], io);
  const help = await reportCommand(['--help'], io);
  assert.equal(code, 0);
  assert.equal(help, 0);
  assert.ok(existsSync(out));
  assert.match(readFileSync(out, 'utf8'), /<h1>T<\/h1>/);
  assert.match(written.join(''), /grpo {7}4 {9}0\.100 {8}0\.600 {12}0\.250 → 0\.625/);
  assert.match(written.join(''), new RegExp(`report written to ${out.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
  assert.match(written.join(''), /trinity report JOB_DIR \[--out FILE\] \[--title T\]/);
  assert.deepEqual(errors, []);
  assert.equal(await reportCommand([], io), 2);
  assert.match(errors.join(''), /give exactly one job folder/);
  assert.equal(await reportCommand([join(job, 'missing')], io), 1);
  assert.match(errors.join(''), /trinity report: no such job folder: .*missing/);
  assert.equal(await reportCommand([job, '--bogus'], io), 2);
  assert.match(errors.join(''), /Unknown option '--bogus'/);
});
