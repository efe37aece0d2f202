// Live progress of long work: on a terminal, one status line redrawn in place (bar, step, chosen metrics, step
// time, ETA); elsewhere (CI logs, files), a plain line at most every `plainIntervalMs` and at the end.
//   [grpo] ███████░░░░░░░░░  12/30  40% | reward 0.42 | accuracy 0.35 | 1.20 s/step | ETA 21s
export interface ProgressOptions {
  label: string;
  total: number;
  stream?: NodeJS.WritableStream & { isTTY?: boolean; columns?: number };
  /** Redraw in place (default: whether the stream is a terminal). */
  live?: boolean;
  plainIntervalMs?: number;
  now?: () => number;
}

export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return '?';
  if (seconds < 60) return `${Math.round(seconds)}s`;
  const m = Math.floor(seconds / 60);
  if (m < 60) return `${m}m${String(Math.round(seconds % 60)).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}

function formatValue(value: number | string): string {
  if (typeof value === 'string') return value;
  if (Number.isInteger(value)) return String(value);
  return Math.abs(value) >= 100 ? value.toFixed(1) : value.toFixed(3);
}

export class ProgressReporter {
  readonly #stream: NodeJS.WritableStream & { isTTY?: boolean; columns?: number };
  readonly #live: boolean;
  readonly #plainIntervalMs: number;
  readonly #now: () => number;
  #label: string;
  #total: number;
  #step = 0;
  /**
   * Where the pace is measured from: the first update after the stage started (or resumed) — the setup before it
   * (loading the model, starting engines) is no step's time.
   */
  #paceFrom: { step: number; at: number } | null = null;
  #fields: Record<string, number | string> = {};
  #lastPlain = Number.NEGATIVE_INFINITY;
  #drawn = false;

  constructor(options: ProgressOptions) {
    this.#stream = options.stream ?? process.stderr;
    this.#live = options.live ?? Boolean(this.#stream.isTTY);
    this.#plainIntervalMs = options.plainIntervalMs ?? 10_000;
    this.#now = options.now ?? (() => Date.now());
    this.#label = options.label;
    this.#total = options.total;
  }

  /** A stage starts (or resumes) at `step`: the ETA will use only its own pace, from its first update on. */
  resumeAt(step: number): void {
    this.#step = step;
    this.#paceFrom = null;
  }

  /** The status line for the current state. */
  render(): string {
    if (!Number.isFinite(this.#total)) return this.#renderOpenEnded();
    const done = Math.min(this.#step, this.#total);
    const fraction = this.#total > 0 ? done / this.#total : 0;
    const width = 16;
    const filled = Math.round(fraction * width);
    const perStep = this.#secondsPerStep();
    const eta = perStep * (this.#total - done);
    const parts = [
      `[${this.#label}] ${'█'.repeat(filled)}${'░'.repeat(width - filled)} ${String(done).padStart(String(this.#total).length)}/${this.#total} ${String(Math.round(fraction * 100)).padStart(3)}%`,
      ...Object.entries(this.#fields).map(([k, v]) => `${k} ${formatValue(v)}`),
      Number.isFinite(perStep) ? `${perStep.toFixed(2)} s/step` : '',
      `ETA ${formatDuration(eta)}`,
    ].filter((p) => p.length > 0);
    return parts.join(' | ');
  }

  /** The pace since the first update (NaN before a second one). */
  #secondsPerStep(): number {
    const from = this.#paceFrom;
    return from !== null && this.#step > from.step ? (this.#now() - from.at) / 1000 / (this.#step - from.step) : Number.NaN;
  }

  /** A stage with no end step (online training): the step and its pace, no bar or ETA. */
  #renderOpenEnded(): string {
    const perStep = this.#secondsPerStep();
    return [
      `[${this.#label}] step ${this.#step} (no end step)`,
      ...Object.entries(this.#fields).map(([k, v]) => `${k} ${formatValue(v)}`),
      Number.isFinite(perStep) ? `${perStep.toFixed(2)} s/step` : '',
    ]
      .filter((p) => p.length > 0)
      .join(' | ');
  }

  update(step: number, fields: Record<string, number | string> = {}): void {
    this.#paceFrom ??= { step, at: this.#now() };
    this.#step = step;
    this.#fields = { ...this.#fields, ...fields };
    if (this.#live) this.#draw();
    else if (this.#now() - this.#lastPlain >= this.#plainIntervalMs || step >= this.#total) {
      this.#lastPlain = this.#now();
      this.#stream.write(`${this.render()}\n`);
    }
  }

  /** Switches to another phase (e.g. the next stage) keeping the line. */
  setLabel(label: string, total = this.#total): void {
    // another phase's fields (the last stage's reward) say nothing about this one
    if (label !== this.#label) this.#fields = {};
    this.#label = label;
    this.#total = total;
  }

  /** Prints a line above the status line. */
  log(line: string): void {
    if (this.#live && this.#drawn) this.#stream.write('\r\x1b[2K');
    this.#stream.write(`${line}\n`);
    if (this.#live && this.#drawn) this.#draw();
  }

  /** Ends the status line. */
  done(message?: string): void {
    if (this.#live) {
      this.#draw();
      this.#stream.write('\n');
    } else if (this.#lastPlain === Number.NEGATIVE_INFINITY || this.#step < this.#total) {
      this.#stream.write(`${this.render()}\n`);
    }
    if (message) this.#stream.write(`${message}\n`);
    this.#drawn = false;
  }

  #draw(): void {
    const columns = this.#stream.columns ?? 120;
    let line = this.render();
    if (line.length > columns - 1) line = `${line.slice(0, columns - 2)}…`;
    this.#stream.write(`\r\x1b[2K${line}`);
    this.#drawn = true;
  }
}
