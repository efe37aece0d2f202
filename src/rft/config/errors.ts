// Config problems and the error that carries all of them. A problem names the key path (`buffer.batch_size`,
// `stages.0.mode`; '' for the file as a whole) and, where known, where the value came from: `file.yaml:12:5`, or the
// `--set` override that wrote it.

export interface ConfigProblem {
  /** Dotted key path with list indices (`buffer.explorer_input.eval_tasksets.0.path`); '' for the whole file. */
  path: string;
  message: string;
  /** Where the offending value was written: `config.yaml:12:5` or `--set buffer.batch_size=abc`. */
  source?: string;
}

/** How a section's rules report a problem: the key path and what is wrong there. */
export type ReportProblem = (path: string, message: string) => void;

/** Formats one problem as `path: message (source)`. */
export function formatProblem(problem: ConfigProblem): string {
  const where = problem.source === undefined ? '' : ` (${problem.source})`;
  return problem.path === '' ? `${problem.message}${where}` : `${problem.path}: ${problem.message}${where}`;
}

/** An invalid config: every problem found, reported at once. Nothing should run when this is thrown. */
export class ConfigError extends Error {
  readonly problems: readonly ConfigProblem[];

  constructor(
    problems: readonly ConfigProblem[],
    readonly file?: string,
  ) {
    const what = file === undefined ? 'invalid config' : `invalid config ${file}`;
    const count = problems.length === 1 ? '1 problem' : `${problems.length} problems`;
    super(`${what}: ${count}\n${problems.map((p) => `  - ${formatProblem(p)}`).join('\n')}`);
    this.name = 'ConfigError';
    this.problems = problems;
  }
}
