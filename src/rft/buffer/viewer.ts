// A plain-text view of experiences for `trinity buffer view` and debugging: one row per experience with its id,
// task, reward, mean advantage, response length, the decoded response (when a tokenizer is given) and the token
// ids, prompt and response split by "|".
import { type Experience, responseLength } from '../experience.js';

export interface ViewerTokenizer {
  decode(ids: readonly number[]): string;
}

export interface FormatOptions {
  tokenizer?: ViewerTokenizer;
  /** Rows shown (default all). */
  limit?: number;
  /** Width of the decoded text column (default 60 characters). */
  maxTextChars?: number;
  /** Token ids shown per row before "…" (default 24). */
  maxTokens?: number;
}

export function formatExperiences(experiences: readonly Experience[], options: FormatOptions = {}): string {
  const limit = options.limit ?? experiences.length;
  const shown = experiences.slice(0, limit);
  const maxText = options.maxTextChars ?? 60;
  const maxTokens = options.maxTokens ?? 24;
  const header = ['eid', 'task', 'reward', 'adv_mean', 'resp_len'];
  if (options.tokenizer) header.push('response');
  header.push('tokens (prompt | response)');
  const rows = shown.map((e) => {
    const row = [
      e.eid,
      e.info.taskId === undefined ? '-' : String(e.info.taskId),
      e.reward === undefined ? '-' : formatNumber(e.reward),
      e.advantages === undefined || e.advantages.length === 0 ? '-' : formatNumber(mean(e.advantages)),
      String(responseLength(e)),
    ];
    if (options.tokenizer) {
      const text = JSON.stringify(options.tokenizer.decode(e.tokens.slice(e.promptLength))).slice(1, -1);
      row.push(text.length > maxText ? `${text.slice(0, maxText - 1)}…` : text);
    }
    row.push(formatTokens(e, maxTokens));
    return row;
  });
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] as string).length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, c) => (c === cells.length - 1 ? cell : cell.padEnd(widths[c] as number)))
      .join('  ')
      .trimEnd();
  const out = [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)];
  if (shown.length < experiences.length) out.push(`… ${experiences.length - shown.length} more`);
  return `${out.join('\n')}\n`;
}

function formatTokens(e: Experience, maxTokens: number): string {
  const ids = e.tokens.slice(0, maxTokens);
  const prompt = ids.slice(0, e.promptLength).join(' ');
  const response = ids.slice(e.promptLength).join(' ');
  const more = e.tokens.length > maxTokens ? ` … (+${e.tokens.length - maxTokens})` : '';
  return `${prompt} |${response.length > 0 ? ` ${response}` : ''}${more}`;
}

function mean(values: readonly number[]): number {
  return values.reduce((s, v) => s + v, 0) / values.length;
}

function formatNumber(x: number): string {
  return Number.isInteger(x) ? String(x) : x.toFixed(4);
}
