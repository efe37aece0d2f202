// `trinity report JOB_DIR [--out FILE] [--title T]`: the run's report as one HTML file, and its summary table.
import { parseArgs } from 'node:util';
import { formatSummaryTable, writeReport } from '../rft/report/index.js';

export const REPORT_HELP = `trinity report JOB_DIR [--out FILE] [--title T]
  Writes a run's report as one self-contained HTML file (no scripts, nothing fetched; open it in any browser) and
  prints the summary table. JOB_DIR is a run's job folder (checkpoint_root_dir/project/name): its metrics.jsonl, or
  one folder per stage with a metrics.jsonl each (two levels deep at most), in the order of JOB_DIR/stages.json when
  present, else by time. eval_samples.jsonl next to a metrics.jsonl adds the sampled problems table.

  The report: a summary per stage (steps, first/last reward mean, eval accuracy at the start and end of each stage:
  base → after SFT → after GRPO), charts over steps (reward mean ± std, eval accuracy per taskset, response length,
  KL, entropy, loss, gradient norm, learning rate; stages one after another on one step axis), and sampled eval
  problems with the model's answers at the first and last eval step.

  --out FILE     where to write the report (default JOB_DIR/report.html)
  --title T      the report's title (default "Run report: <JOB_DIR's name>")
  --samples N    sampled problems to show (default 8)
`;

export interface CommandIO {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
}

/** Runs `trinity report ...`; returns the exit code. Writes to the process's streams unless `io` names others. */
export async function reportCommand(args: string[], io: CommandIO = process): Promise<number> {
  const { stdout, stderr } = io;
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(args);
  } catch (error) {
    stderr.write(`trinity report: ${(error as Error).message}\n\n${REPORT_HELP}`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help) {
    stdout.write(REPORT_HELP);
    return 0;
  }
  const [jobDir] = positionals;
  if (jobDir === undefined || positionals.length > 1) {
    stderr.write(`trinity report: give exactly one job folder\n\n${REPORT_HELP}`);
    return 2;
  }
  const maxSamples = values.samples === undefined ? 8 : Number(values.samples);
  if (!Number.isInteger(maxSamples) || maxSamples < 0) {
    stderr.write(`trinity report: --samples must be a whole number, got '${values.samples}'\n`);
    return 2;
  }
  try {
    const result = await writeReport(jobDir, {
      maxSamples,
      ...(values.out !== undefined ? { out: values.out } : {}),
      ...(values.title !== undefined ? { title: values.title } : {}),
    });
    for (const warning of result.warnings) stderr.write(`warning: ${warning}\n`);
    stdout.write(`${formatSummaryTable(result.summary)}\nreport written to ${result.file}\n`);
    return 0;
  } catch (error) {
    stderr.write(`trinity report: ${(error as Error).message}\n`);
    return 1;
  }
}

function parse(args: string[]) {
  return parseArgs({
    args,
    allowPositionals: true,
    options: {
      out: { type: 'string' },
      title: { type: 'string' },
      samples: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
}
