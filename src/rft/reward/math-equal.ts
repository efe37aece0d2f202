// Qwen2.5-Math's answer equivalence (Trinity-RFT's verify_math_answer in trinity/utils/math_eval_utils.py, the
// grader of math_eval_workflow): the final answer is read from a response and from the reference alike, both are
// normalised (./qwen-math-normalise.ts), and then compared:
//
//   extract   the text after the last "boxed" (its balanced {…}, else up to the next "$" or "}"); else what follows
//             "final answer is" / "the answer is" / "答案是" on its line (a trailing "." dropped); else the last number
//             (commas removed): "The answer is \\boxed{\\dfrac{1}{2}}" → "\\frac{1}{2}"
//   equal     the same string; else
//             numbers (Python float(), commas dropped): p ≈ r, p ≈ r/100 or p ≈ r·100 (|a−b| ≤ 1e-4·max(|a|,|b|));
//               a verdict: "50" vs "0.5" equal (a percentage), "3" vs "3.001" not, no symbolic fallback
//             both bracketed — (a,b), [a,b), … — element-wise; both \begin{pmatrix} — element-wise, same shape
//             equations: "y=2x" vs "y-2x=0" as (lhs)−(rhs) symbolically; "x=3" vs "3" by the value when the
//               variable's name has at most 2 characters
//             symbolic (symbolicEqual): both parsed (./math-expression.ts); without variables, their values within
//               the same 1e-4; with variables, equal at 8 seeded points drawn from [0.5, 3); lists item by item
//
// Where this differs from sympy: sympy's simplify() proves identities (x² − 1 = (x−1)(x+1) for every x, symbols
// complex); here identities are tested at real points in [0.5, 3), so √(x²) = x is equal here and not in sympy, and an
// identity that fails only outside that range would pass. The parser reads the LaTeX above, not sympy's whole
// grammar (no \binom, integrals, sets as {…} with set operations): such answers are equal only as strings.

import { type MathAnswer, type MathExpr, evaluate, parseMathExpression, variablesOf } from './math-expression.js';
import { normaliseMathAnswer } from './qwen-math-normalise.js';

/** Qwen2.5-Math's extract_answer (see the header): the answer of a response, normalised; null when none is found. */
export function extractMathAnswer(response: string): string | null {
  if (response.includes('boxed')) {
    const after = response.split('boxed').at(-1) as string;
    if (after === '') return null;
    if (after.startsWith('{')) {
      let depth = 1;
      for (let i = 1; i < after.length; i++) {
        if (after[i] === '{') depth++;
        else if (after[i] === '}' && --depth === 0) return normaliseMathAnswer(after.slice(1, i));
      }
    }
    const bare = /\{?([^$}]+)\}?/.exec(after);
    if (bare) return normaliseMathAnswer(bare[1] as string);
  }
  for (const pattern of [/(?:final|the)\s+answer\s+is\s*:?\s*(.+)/i, /答案是\s*:?\s*(.+)/i]) {
    const stated = pattern.exec(response);
    if (stated) {
      const answer = normaliseMathAnswer(stated[1] as string);
      return answer?.endsWith('.') ? answer.slice(0, -1) : answer;
    }
  }
  return (
    response
      .replace(/,/g, '')
      .match(/[-+]?\d*\.?\d+/g)
      ?.at(-1) ?? null
  );
}

/** Python's isclose(a, b, rel_tol=1e-4): the grader's numeric tolerance. */
export function numericEqual(a: number, b: number): boolean {
  if (a === b) return true;
  if (!Number.isFinite(a) || !Number.isFinite(b)) return false;
  return Math.abs(a - b) <= 1e-4 * Math.max(Math.abs(a), Math.abs(b));
}

/** Python's float(text) (spaces around, "_" between digits, "1e5", "inf", "nan"); null where it raises. */
export function pythonFloat(text: string): number | null {
  const s = text.trim();
  const digits = '\\d(?:_?\\d)*';
  if (new RegExp(`^[+-]?(?:${digits}(?:\\.(?:${digits})?)?|\\.${digits})(?:[eE][+-]?${digits})?$`).test(s))
    return Number(s.replace(/_/g, ''));
  const special = /^([+-]?)(inf|infinity|nan)$/i.exec(s);
  if (special === null) return null;
  if ((special[2] as string).toLowerCase() === 'nan') return Number.NaN;
  return special[1] === '-' ? Number.NEGATIVE_INFINITY : Number.POSITIVE_INFINITY;
}

/** Numbers (see the header): a verdict when both are numbers, else null. */
function compareNumbers(prediction: string, reference: string): boolean | null {
  const p = pythonFloat(prediction.replace(/,/g, ''));
  const r = pythonFloat(reference.replace(/,/g, ''));
  if (p === null || r === null) return null;
  return [r, r / 100, r * 100].some((value) => numericEqual(p, value));
}

const MATRIX_BEGIN = '\\begin{pmatrix}';
const MATRIX_END = '\\end{pmatrix}';

/** Bracketed lists and pmatrix matrices element-wise (see the header): true, or null to go on. */
function compareStructures(prediction: string, reference: string): true | null {
  const bracketed = (s: string) => /^[([]/.test(s) && /[)\]]$/.test(s);
  if (bracketed(prediction) && bracketed(reference)) {
    const p = prediction.slice(1, -1).split(',');
    const r = reference.slice(1, -1).split(',');
    if (p.length === r.length && p.every((item, i) => mathEqual(item.trim(), (r[i] as string).trim()))) return true;
  }
  if (prediction.startsWith(MATRIX_BEGIN) && reference.startsWith(MATRIX_BEGIN)) {
    const rows = (s: string) =>
      s
        .slice(MATRIX_BEGIN.length, s.length - MATRIX_END.length)
        .split('\\\\')
        .map((row) => row.split('&'));
    const p = rows(prediction);
    const r = rows(reference);
    const sameShape = p.length === r.length && p[0]?.length === r[0]?.length;
    // zip semantics, as the source: rows and items beyond the shorter side are not compared
    const pairs = p.flatMap((row, i) => row.map((item, j) => [item, r[i]?.[j]] as const)).filter(([, b]) => b !== undefined);
    if (sameShape && pairs.every(([a, b]) => mathEqual(a.trim(), (b as string).trim()))) return true;
  }
  return null;
}

/** Equations (see the header): true, or null to go on. */
function compareEquations(prediction: string, reference: string): true | null {
  const equals = (s: string) => s.split('=').length - 1;
  const sides = (s: string) => s.split('=').map((side) => side.trim()) as [string, string];
  if (equals(prediction) === 1 && equals(reference) === 1) {
    const [pl, pr] = sides(prediction);
    const [rl, rr] = sides(reference);
    if (symbolicEqual(`(${pl})-(${pr})`, `(${rl})-(${rr})`)) return true;
  }
  if (equals(prediction) === 1 && equals(reference) === 0) {
    const [name, value] = sides(prediction);
    if (name.length <= 2 && mathEqual(value, reference)) return true;
  }
  if (equals(reference) === 1 && equals(prediction) === 0) {
    const [name, value] = sides(reference);
    if (name.length <= 2 && mathEqual(prediction, value)) return true;
  }
  return null;
}

/** Qwen2.5-Math's math_equal over two normalised answers (see the header). */
export function mathEqual(prediction: string | null, reference: string | null): boolean {
  if (prediction === null || reference === null) return false;
  if (prediction === reference) return true;
  for (const compare of [compareNumbers, compareStructures, compareEquations]) {
    const verdict = compare(prediction, reference);
    if (verdict !== null) return verdict;
  }
  return symbolicEqual(prediction, reference);
}

/** The seeded points of the identity test: 8 per variable, from [0.5, 3) (mulberry32, seed 2024). */
const SAMPLE_POINTS = 8;
function samplePoints(variables: readonly string[]): Record<string, number>[] {
  let state = 2024;
  const next = () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return Array.from({ length: SAMPLE_POINTS }, () => Object.fromEntries(variables.map((name) => [name, 0.5 + 2.5 * next()])));
}

/** Two expressions equal: by value within 1e-4 without variables, else at every sample point where both are real. */
function expressionsEqual(a: MathExpr, b: MathExpr): boolean {
  const variables = [...variablesOf(b, variablesOf(a))].sort();
  if (variables.length === 0) return numericEqual(evaluate(a), evaluate(b));
  let compared = 0;
  for (const point of samplePoints(variables)) {
    const [va, vb] = [evaluate(a, point), evaluate(b, point)];
    if (Number.isNaN(va) && Number.isNaN(vb)) continue; // outside both domains (e.g. a log of a negative)
    if (!(va === vb || Math.abs(va - vb) <= 1e-9 * Math.max(1, Math.abs(va), Math.abs(vb)))) return false;
    compared++;
  }
  return compared > 0;
}

function answersEqual(a: MathAnswer, b: MathAnswer): boolean {
  if (a.kind === 'expression' && b.kind === 'expression') return expressionsEqual(a.expr, b.expr);
  if (a.kind === 'equation' && b.kind === 'equation') {
    const difference = (e: { left: MathExpr; right: MathExpr }): MathExpr => ({
      kind: 'binary',
      op: '-',
      left: e.left,
      right: e.right,
    });
    return expressionsEqual(difference(a), difference(b));
  }
  if (a.kind === 'list' && b.kind === 'list')
    return a.items.length === b.items.length && a.items.every((item, i) => answersEqual(item, b.items[i] as MathAnswer));
  return false;
}

/** Symbolic equality of two answers (see the header); where either does not parse, only the same text is equal. */
export function symbolicEqual(a: string, b: string): boolean {
  if (a === b) return true; // sympy's first check, on the strings it could not parse too
  const [pa, pb] = [a, b].map((s) => parseMathExpression(s.replaceAll('\\\\', '\\')));
  return pa !== null && pb !== null && pa !== undefined && pb !== undefined && answersEqual(pa, pb);
}

/** The grade of a response: accuracy 1 when its answer equals the reference's answer (both extracted), else 0. */
export function verifyMathAnswer(
  response: string,
  reference: string,
): { accuracy: 0 | 1; prediction: string | null; groundTruth: string | null } {
  const prediction = extractMathAnswer(response);
  const groundTruth = extractMathAnswer(reference);
  return { accuracy: mathEqual(prediction, groundTruth) ? 1 : 0, prediction, groundTruth };
}
