// countdown_reward (Trinity-RFT's CountDownRewardFn, after TinyZero's countdown score): reach `target` with an
// arithmetic expression that uses each of `numbers` exactly once.
//
//   equation = the last <answer>…</answer> on the response's last line (none: reward 0)
//   reward   = 1                 when the equation uses exactly the numbers (as multisets of the digit runs in it)
//                                 and evaluates to within 1e-5 of target
//              0.1 (format score) otherwise (wrong numbers, wrong value, not an expression, division by zero)
//
// The reference is the task's answer (response_key) as upstream's countdown rows carry it, JSON text
// {"target": 24, "numbers": [4, 6, 1]}, or else the row's own fields `target` and `nums` (TinyZero's Countdown-Tasks
// rows) or `numbers`. The equation is evaluated as Python's eval does with the characters upstream allows (digits,
// + - * / ( ) . and spaces): `/` true division, `//` floor division, `**` power (right-associative, binding tighter
// than a unary minus on its left), decimal literals; `01` is a syntax error there and here.
import type { Task } from '../task.js';
import type { RewardModule } from './module.js';
import { REWARD_FUNCTIONS } from './reward-registry.js';

export interface CountdownProblem {
  target: number;
  numbers: number[];
}

const WHO = 'countdown_reward';

/** The target and numbers of a task (see the header); throws naming the task and what is missing. */
export function countdownProblem(task: Task): CountdownProblem {
  let source: Record<string, unknown> = task.raw;
  let where = `task ${task.id}`;
  if (typeof task.response === 'string' && task.response.trim() !== '') {
    where = `task ${task.id}: its answer (response_key)`;
    try {
      source = JSON.parse(task.response) as Record<string, unknown>;
    } catch {
      throw new Error(`${WHO}: ${where} must be JSON text {"target": …, "numbers": […]}, got ${JSON.stringify(task.response)}`);
    }
    if (source === null || typeof source !== 'object' || Array.isArray(source))
      throw new Error(`${WHO}: ${where} must be a JSON object {"target": …, "numbers": […]}`);
  }
  const target = source.target;
  const numbers = source.numbers ?? source.nums;
  if (typeof target !== 'number' || !Number.isFinite(target))
    throw new Error(`${WHO}: ${where} has no numeric 'target' (got ${JSON.stringify(target)})`);
  if (!Array.isArray(numbers) || numbers.length === 0 || !numbers.every((n) => Number.isInteger(n) && n >= 0))
    throw new Error(
      `${WHO}: ${where} has no 'numbers' (or 'nums') list of non-negative integers (got ${JSON.stringify(numbers)})`,
    );
  return { target, numbers: numbers as number[] };
}

/** The equation of a response: the last <answer>…</answer> on its last line, trimmed; null when there is none. */
export function extractCountdownEquation(response: string): string | null {
  const lastLine = response.split('\n').at(-1) ?? '';
  const matches = [...lastLine.matchAll(/<answer>(.*?)<\/answer>/g)];
  return matches.length > 0 ? (matches.at(-1)?.[1] ?? '').trim() : null;
}

/** True when the digit runs of the equation are exactly `numbers` (as multisets). */
export function usesExactlyNumbers(equation: string, numbers: readonly number[]): boolean {
  const used = (equation.match(/\d+/g) ?? []).map(Number).sort((a, b) => a - b);
  const given = [...numbers].sort((a, b) => a - b);
  return used.length === given.length && used.every((n, i) => n === given[i]);
}

/**
 * The value of an arithmetic expression as Python's eval gives it (see the header), or null when it is not one
 * (other characters, a syntax error, division by zero).
 */
export function evaluateArithmetic(expression: string): number | null {
  if (!/^[\d+\-*/().\s]+$/.test(expression)) return null;
  const tokens = expression.match(/\*\*|\/\/|\d+\.?\d*|\.\d+|[+\-*/()]|\S/g) ?? [];
  let at = 0;
  const fail = (): never => {
    throw new SyntaxError('not an expression');
  };
  const peek = (): string | undefined => tokens[at];
  // expr := term (('+' | '-') term)* ; term := unary (('*' | '/' | '//') unary)* ; unary := ('+' | '-') unary | power
  // power := atom ('**' unary)? ; atom := number | '(' expr ')'
  const expr = (): number => {
    let value = term();
    for (let op = peek(); op === '+' || op === '-'; op = peek()) {
      at++;
      value = op === '+' ? value + term() : value - term();
    }
    return value;
  };
  const term = (): number => {
    let value = unary();
    for (let op = peek(); op === '*' || op === '/' || op === '//'; op = peek()) {
      at++;
      const right = unary();
      if (op === '*') value *= right;
      else if (right === 0) fail();
      else value = op === '/' ? value / right : Math.floor(value / right);
    }
    return value;
  };
  const unary = (): number => {
    const op = peek();
    if (op === '+' || op === '-') {
      at++;
      return op === '-' ? -unary() : unary();
    }
    return power();
  };
  const power = (): number => {
    const base = atom();
    if (peek() !== '**') return base;
    at++;
    const exponent = unary();
    if (base === 0 && exponent < 0) fail();
    return base ** exponent;
  };
  const atom = (): number => {
    const token = tokens[at++];
    if (token === '(') {
      const value = expr();
      if (tokens[at++] !== ')') fail();
      return value;
    }
    if (token === undefined || !/^(\d+\.?\d*|\.\d+)$/.test(token)) return fail();
    if (/^0+[1-9]\d*$/.test(token)) fail(); // Python: leading zeros in an integer literal
    return Number(token);
  };
  try {
    const value = expr();
    return at === tokens.length && Number.isFinite(value) ? value : null;
  } catch {
    return null;
  }
}

/** Upstream's constants (CountDownRewardFn takes no arguments). */
const SCORE = 1;
const FORMAT_SCORE = 0.1;

export const countdownReward: RewardModule<Record<string, never>> = {
  name: WHO,
  description:
    'countdown: 1 when <answer>equation</answer> uses each number once and equals target, 0.1 when not, 0 with no answer',
  defaults: {},
  score: ({ response, task }) => {
    const { target, numbers } = countdownProblem(task);
    const equation = extractCountdownEquation(response);
    if (equation === null) return { reward: 0, metrics: { accuracy: 0 } };
    const value = usesExactlyNumbers(equation, numbers) ? evaluateArithmetic(equation) : null;
    const correct = value !== null && Math.abs(value - target) < 1e-5;
    return { reward: correct ? SCORE : FORMAT_SCORE, metrics: { accuracy: correct ? 1 : 0 } };
  },
};

REWARD_FUNCTIONS.registerModule(countdownReward);
