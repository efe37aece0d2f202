// Strict parsing of an LLM judge's answer. The judge may reason first; its verdict is its LAST non-empty line, and
// that line must be exactly (spaces around the parts allowed, nothing else):
//
//   pointwise (rubric_judge_reward)   Score: <number>                    e.g. "Score: 7", "Score: 0.5"
//   group (ruler_reward)              Scores: [<number>, <number>, ...]  a JSON array, one number per response
//
// and every number must lie in [min, max]. Anything else (no verdict line, markdown around it, a word instead of a
// number, a score outside the scale, a list of the wrong length) is a JudgeFailure: the caller counts it and gives the
// configured fallback reward. Nothing is clamped or guessed: a judge that drifts from the format shows up in metrics.
//
// Trinity-RFT's own judge workflows ask for other forms, parsed as they parse them (verdict_format):
//
//   json_rating (rubric_judge_workflow)   the first ```json fenced block (else the first ``` block) holds a JSON
//                                         object whose "rating" is a number      e.g. ```json {"rating": 7} ```
//   last_list (RULER's own prompts)       the text from the last "[" to the last "]" is a JSON list of numbers,
//                                         one per response                      e.g. "... so: [0.2, 0.9]"
//
// with the same failure kinds (and no clamping: upstream clipped RULER's scores into [0, 1]).

/** Why a judge's answer was rejected (metric judge_failure_<kind>). */
export type JudgeFailureKind = 'empty' | 'no_verdict' | 'out_of_range' | 'wrong_count';

export const POINTWISE_FAILURE_KINDS: readonly JudgeFailureKind[] = ['empty', 'no_verdict', 'out_of_range'];
export const GROUP_FAILURE_KINDS: readonly JudgeFailureKind[] = ['empty', 'no_verdict', 'out_of_range', 'wrong_count'];

export type JudgeVerdict<T> = { ok: true; value: T } | { ok: false; kind: JudgeFailureKind; detail: string };

export interface ScoreScale {
  min: number;
  max: number;
}

// A decimal number as a judge writes it: optional sign, digits, optional fraction (no exponent, no "7/10", no "7.").
const NUMBER = String.raw`[+-]?(?:\d+(?:\.\d+)?|\.\d+)`;
const SCORE_LINE = new RegExp(String.raw`^Score:[ \t]*(${NUMBER})[ \t]*$`);
const SCORES_LINE = /^Scores:[ \t]*(\[.*\])[ \t]*$/;

function lastLine(answer: string | null | undefined): JudgeVerdict<string> {
  const lines = (answer ?? '').split(/\r?\n/).filter((line) => line.trim() !== '');
  const last = lines.at(-1);
  if (last === undefined) return { ok: false, kind: 'empty', detail: 'the judge answered nothing' };
  return { ok: true, value: last.trim() };
}

const outside = (score: number, { min, max }: ScoreScale): boolean => !(score >= min && score <= max);

/** The score of a pointwise judge's answer: its last non-empty line must be `Score: <number>` within the scale. */
export function parseScoreVerdict(answer: string | null | undefined, scale: ScoreScale): JudgeVerdict<number> {
  const line = lastLine(answer);
  if (!line.ok) return line;
  const match = SCORE_LINE.exec(line.value);
  if (match === null)
    return { ok: false, kind: 'no_verdict', detail: `last line ${JSON.stringify(line.value)} is not "Score: <number>"` };
  const score = Number(match[1]);
  if (outside(score, scale))
    return { ok: false, kind: 'out_of_range', detail: `score ${score} is outside [${scale.min}, ${scale.max}]` };
  return { ok: true, value: score };
}

/**
 * The scores of a group judge's answer: its last non-empty line must be `Scores: [...]`, a JSON array of exactly
 * `count` numbers within the scale.
 */
export function parseScoresVerdict(answer: string | null | undefined, count: number, scale: ScoreScale): JudgeVerdict<number[]> {
  const line = lastLine(answer);
  if (!line.ok) return line;
  const match = SCORES_LINE.exec(line.value);
  const notAList = {
    ok: false,
    kind: 'no_verdict',
    detail: `last line ${JSON.stringify(line.value)} is not "Scores: [n, ...]"`,
  } as const;
  if (match === null) return notAList;
  let parsed: unknown;
  try {
    parsed = JSON.parse(match[1] as string);
  } catch {
    return notAList;
  }
  if (!Array.isArray(parsed) || !parsed.every((s): s is number => typeof s === 'number' && Number.isFinite(s))) return notAList;
  return checkedScores(parsed, count, scale);
}

/** A parsed list of scores: exactly `count` of them, each within the scale. */
function checkedScores(scores: number[], count: number, scale: ScoreScale): JudgeVerdict<number[]> {
  if (scores.length !== count)
    return { ok: false, kind: 'wrong_count', detail: `${scores.length} scores for ${count} responses` };
  const bad = scores.findIndex((s) => outside(s, scale));
  if (bad >= 0)
    return {
      ok: false,
      kind: 'out_of_range',
      detail: `score ${scores[bad]} of response ${bad + 1} is outside [${scale.min}, ${scale.max}]`,
    };
  return { ok: true, value: scores };
}

/** Metrics of one judged response: judge_failure (0/1) and judge_failure_<kind> (0/1) for each kind listed. */
export function judgeFailureMetrics(
  failure: JudgeFailureKind | null,
  kinds: readonly JudgeFailureKind[],
): Record<string, number> {
  const metrics: Record<string, number> = { judge_failure: failure === null ? 0 : 1 };
  for (const kind of kinds) metrics[`judge_failure_${kind}`] = failure === kind ? 1 : 0;
  return metrics;
}

/** The rating of a ```json {"rating": N} ``` answer (see the header), within the scale. */
export function parseRatingVerdict(answer: string | null | undefined, scale: ScoreScale): JudgeVerdict<number> {
  const text = answer ?? '';
  if (text.trim() === '') return { ok: false, kind: 'empty', detail: 'the judge answered nothing' };
  let fence = '```json';
  let start = text.indexOf(fence);
  if (start < 0) {
    fence = '```';
    start = text.indexOf(fence);
  }
  const end = start < 0 ? -1 : text.indexOf('```', start + fence.length);
  if (end < 0) return { ok: false, kind: 'no_verdict', detail: 'no closed ``` block holding {"rating": N}' };
  let parsed: unknown;
  try {
    parsed = JSON.parse(text.slice(start + fence.length, end));
  } catch {
    parsed = undefined;
  }
  const rating = (parsed as { rating?: unknown } | null)?.rating;
  if (typeof rating !== 'number' || !Number.isFinite(rating))
    return { ok: false, kind: 'no_verdict', detail: 'the ``` block is not a JSON object with a numeric "rating"' };
  if (outside(rating, scale))
    return { ok: false, kind: 'out_of_range', detail: `rating ${rating} is outside [${scale.min}, ${scale.max}]` };
  return { ok: true, value: rating };
}

/** The scores of an answer whose last "[" … last "]" is a JSON list of `count` numbers within the scale. */
export function parseLastListVerdict(
  answer: string | null | undefined,
  count: number,
  scale: ScoreScale,
): JudgeVerdict<number[]> {
  const text = answer ?? '';
  if (text.trim() === '') return { ok: false, kind: 'empty', detail: 'the judge answered nothing' };
  const open = text.lastIndexOf('[');
  const close = text.lastIndexOf(']');
  let parsed: unknown;
  try {
    parsed = open < 0 || close < open ? undefined : JSON.parse(text.slice(open, close + 1));
  } catch {
    parsed = undefined;
  }
  if (!Array.isArray(parsed) || !parsed.every((s): s is number => typeof s === 'number' && Number.isFinite(s)))
    return { ok: false, kind: 'no_verdict', detail: 'the text from the last "[" to the last "]" is not a list of numbers' };
  return checkedScores(parsed, count, scale);
}
