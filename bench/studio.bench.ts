// Trinity Studio: (1) time to first render in Chromium of a run with 100,000 metric rows and 10,000 rollouts (the
// Curves page with two metrics drawn; the Rollouts page with its first page of rollouts), cold (the server reads the
// files for the first time) and warm; (2) a real `trinity run`'s step time with and without a Studio and a browser
// watching it live, alternated (ABBA) so both see the same machine load. See bench/README.md.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteBuffer } from '../src/rft/buffer/sqlite.js';
import { JsonlMonitor } from '../src/rft/monitor/monitor.js';
import { startStudio } from '../src/studio/index.js';
import { launchChromium } from '../test/studio/browser.js';
import { makeExperiences, writeRun } from '../test/studio/fixtures.js';
import { makeJob } from '../test/rft/run/helpers.js';
import { median, repoRoot } from './harness.js';

// the page's globals the browser-side callbacks read (no DOM types in this project)
declare const document: { querySelector(selector: string): { getAttribute(name: string): string | null } | null };
declare const window: { studio: { charts: unknown[] } };

const METRIC_ROWS = Number(process.env.STUDIO_BENCH_ROWS ?? 100_000);
const ROLLOUTS = Number(process.env.STUDIO_BENCH_ROLLOUTS ?? 10_000);
const RUN_STEPS = Number(process.env.STUDIO_BENCH_STEPS ?? 8);
const ROUNDS = Number(process.env.STUDIO_BENCH_ROUNDS ?? 2);

async function firstRender() {
  const root = mkdtempSync(join(tmpdir(), 'studio-bench-'));
  const jobDir = await writeRun(root, 'bench', 'big', [{ name: 'grpo', steps: 0, tokenizer: true }]);
  const monitor = new JsonlMonitor(join(jobDir, 'grpo', 'metrics.jsonl'));
  for (let step = 1; step <= METRIC_ROWS; step++)
    monitor.log(step, { 'rollout/reward/mean': Math.sin(step / 500), 'actor/loss': 1 / step, 'actor/kl': step * 1e-6 });
  const buffer = new SqliteBuffer({ path: join(jobDir, 'grpo', 'buffer.db') });
  const experiences = makeExperiences(ROLLOUTS / 10, 5, 2);
  for (let i = 0; i < experiences.length; i += 1000) await buffer.write(experiences.slice(i, i + 1000));
  await buffer.close();
  const studio = await startStudio({ runsDir: root, port: 0 });
  const browser = await launchChromium();
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const run = encodeURIComponent('bench/big');
  const out: Record<string, number> = {};
  try {
    for (const pass of ['cold', 'warm']) {
      let t0 = performance.now();
      await page.goto(`${studio.url}/curves?run=${run}&key=actor/loss,rollout/reward/mean`);
      await page.waitForFunction(() => window.studio.charts.length === 2, undefined, { timeout: 120_000 });
      out[`curves_${pass}_ms`] = performance.now() - t0;
      t0 = performance.now();
      await page.goto(`${studio.url}/rollouts?run=${run}`);
      await page.waitForFunction(
        () => document.querySelector('#rollout-summary')?.getAttribute('data-matched') !== null,
        undefined,
        {
          timeout: 120_000,
        },
      );
      out[`rollouts_${pass}_ms`] = performance.now() - t0;
    }
    const series = (await (await fetch(`${studio.url}/api/runs/${run}/series?key=actor/loss`)).json()) as {
      x: number[];
      total: number;
    };
    out.points_sent = series.x.length;
    out.points_total = series.total;
  } finally {
    await browser.close();
    await studio.close();
    rmSync(root, { recursive: true, force: true });
  }
  return out;
}

/** Runs a tiny real job; returns its median step time (gap between metric lines), seconds. */
async function runJob(watched: boolean): Promise<number> {
  const job = makeJob({ totalSteps: RUN_STEPS, saveInterval: RUN_STEPS });
  const studio = watched ? await startStudio({ runsDir: join(job.root, 'out'), port: 0 }) : null;
  const browser = watched ? await launchChromium() : null;
  try {
    if (browser !== null && studio !== null) {
      // the Runs page and the Curves page, both live, for the whole run
      for (const path of ['/runs', `/curves?run=${encodeURIComponent('test/e2e')}`]) {
        const page = await browser.newPage();
        await page.goto(`${studio.url}${path}`);
      }
    }
    let stderr = '';
    const code = await new Promise<number | null>((resolve) => {
      const child = spawn(process.execPath, [join(repoRoot, 'bin/trinity.js'), 'run', '--config', job.configFile], {
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      child.stderr.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      child.on('exit', resolve);
    });
    if (code !== 0) throw new Error(`trinity run exited with ${code}: ${stderr.slice(-2000)}`);
    const times = readFileSync(join(job.jobDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as { time: number }).time);
    // the first step includes start-up: gaps from step 2 on
    return median(times.slice(2).map((t, i) => t - (times[i + 1] as number)));
  } finally {
    await browser?.close();
    await studio?.close();
    rmSync(job.root, { recursive: true, force: true });
  }
}

const cpu = cpus()[0]?.model ?? 'unknown CPU';
console.log(`Trinity Studio benchmark (${cpu}, ${cpus().length} cores)`);
const render = await firstRender();
console.log(`\nfirst render, ${METRIC_ROWS} metric rows and ${ROLLOUTS} rollouts in one run (Chromium)`);
console.log('page       cold ms   warm ms');
console.log(`curves   ${render.curves_cold_ms?.toFixed(0).padStart(8)}  ${render.curves_warm_ms?.toFixed(0).padStart(8)}`);
console.log(`rollouts ${render.rollouts_cold_ms?.toFixed(0).padStart(8)}  ${render.rollouts_warm_ms?.toFixed(0).padStart(8)}`);
console.log(`(a curve: ${render.points_total} points in the run, ${render.points_sent} sent to the browser)`);

const plain: number[] = [];
const watched: number[] = [];
for (let r = 0; r < ROUNDS; r++)
  for (const w of r % 2 === 0 ? [false, true] : [true, false]) (w ? watched : plain).push(await runJob(w));
console.log(`\ntrinity run step time (tiny GRPO job, ${RUN_STEPS} steps, median of step gaps; ${ROUNDS} runs each, alternated)`);
console.log(`without Studio   ${(median(plain) * 1000).toFixed(0)} ms   (${plain.map((s) => (s * 1000).toFixed(0)).join(', ')})`);
console.log(
  `with Studio      ${(median(watched) * 1000).toFixed(0)} ms   (${watched.map((s) => (s * 1000).toFixed(0)).join(', ')})`,
);
console.log(
  JSON.stringify({
    bench: 'studio',
    cpu,
    metric_rows: METRIC_ROWS,
    rollouts: ROLLOUTS,
    ...render,
    step_s_without_studio: median(plain),
    step_s_with_studio: median(watched),
    step_ratio: median(watched) / median(plain),
  }),
);
