// Math answers: find the final answer in a response, normalise it, compare it exactly with the reference.
//
//   extractAnswer("... so the answer is 1,234.")        → "1,234"
//   extractAnswer("<think>…</think> \\boxed{\\frac{3}{4}}") → "\\frac{3}{4}"
//   answersMatch("0.75", "\\frac{3}{4}")                  → true   (both are the rational 3/4)
//
// Numbers compare as exact rationals (bigint numerator/denominator): "1,000" = "1000" = "1000.0", "0.5" = "1/2" =
// "\\frac{1}{2}", "-3" = "−3". Anything else compares as normalised text (no spaces, `$`, `\\text{}`, `\\left`…).
// No symbolic algebra: "2x+1" and "1+2x" differ (Trinity-RFT uses math_verify for that).

/** The content of the last `\boxed{…}` (or `\fbox{…}`), braces balanced; null when there is none. */
export function extractBoxed(text: string): string | null {
  const start = Math.max(text.lastIndexOf('\\boxed'), text.lastIndexOf('\\fbox'));
  if (start < 0) return null;
  const open = text.indexOf('{', start);
  if (open < 0) {
    // "\boxed 5" (no braces): the next token.
    const bare = /^\\(?:boxed|fbox)\s+([^\s$]+)/.exec(text.slice(start));
    return bare ? (bare[1] as string) : null;
  }
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === '{') depth++;
    else if (text[i] === '}' && --depth === 0) return text.slice(open + 1, i);
  }
  return null;
}

const NUMBER = /[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*\/\s*\d+(?:\.\d+)?)?|[-−]?\.\d+/g;

/**
 * The final answer of a response, first of: the last `\boxed{…}`; the last `<answer>…</answer>`; the text after the
 * last "answer is" / "answer:" / "####"; the last number. Null when none is found.
 */
export function extractAnswer(response: string): string | null {
  const boxed = extractBoxed(response);
  if (boxed !== null) return boxed.trim();
  const tagged = [...response.matchAll(/<answer>([\s\S]*?)<\/answer>/g)].at(-1);
  if (tagged) return (tagged[1] as string).trim();
  const stated = [...response.matchAll(/(?:answer\s*(?:is|:|=)|####)\s*:?\s*([^\n]+)/gi)].at(-1);
  if (stated) {
    const phrase = stripDelimiters(stated[1] as string);
    if (phrase.length > 0) return phrase;
  }
  const numbers = response.match(NUMBER);
  return numbers ? (numbers.at(-1) as string) : null;
}

/** The reference answer of a task: after the last "####" (GSM8K), else the last \boxed{…}, else the whole text. */
export function extractReference(reference: string): string {
  const hashes = reference.lastIndexOf('####');
  if (hashes >= 0) return reference.slice(hashes + 4).trim();
  return (extractBoxed(reference) ?? reference).trim();
}

/** Trims `$…$`, surrounding spaces and a trailing full stop or comma. */
function stripDelimiters(text: string): string {
  let out = text.trim();
  for (;;) {
    const before = out;
    out = out
      .replace(/^\$+|\$+$/g, '')
      .replace(/[.,;]+$/, '')
      .trim();
    if (out === before) return out;
  }
}

/** Canonical text of an answer: LaTeX wrappers and spacing removed, fractions as a/b, lower case. */
export function normaliseAnswer(answer: string): string {
  let s = stripDelimiters(answer);
  s = s.replace(/\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}/g, '$1');
  s = s.replace(/\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}/g, '($1)/($2)').replace(/\\[dt]?frac(\d)(\d)/g, '$1/$2');
  s = s.replace(/\\left|\\right|\\!|\\,|\\;|\\:|\\ |~/g, '');
  s = s.replace(/\^\{?\\circ\}?|°|\\%|%/g, '');
  s = s.replace(/−/g, '-').replace(/\s+/g, '');
  s = s.replace(/\((-?[\d.,]+)\)/g, '$1'); // (3)/(4) → 3/4; (x+1)/(2) keeps its brackets
  return stripDelimiters(s).toLowerCase();
}

/** An exact rational number. */
export interface Rational {
  numerator: bigint;
  denominator: bigint;
}

/** Parses "-1,234.50", "3/4", "-.5", "\\frac{1}{2}" (after normaliseAnswer) as a rational; null when not a number. */
export function parseRational(text: string): Rational | null {
  const s = normaliseAnswer(text);
  const slash = s.indexOf('/');
  if (slash >= 0) {
    const top = parseDecimal(s.slice(0, slash));
    const bottom = parseDecimal(s.slice(slash + 1));
    if (top === null || bottom === null || bottom.numerator === 0n) return null;
    return reduce(top.numerator * bottom.denominator, top.denominator * bottom.numerator);
  }
  return parseDecimal(s);
}

function parseDecimal(s: string): Rational | null {
  const match = /^([-+]?)((?:\d{1,3}(?:,\d{3})+|\d*))(?:\.(\d+))?$/.exec(s);
  if (!match || (match[2] === '' && match[3] === undefined)) return null;
  const sign = match[1] === '-' ? -1n : 1n;
  const whole = (match[2] as string).replace(/,/g, '') || '0';
  const fraction = match[3] ?? '';
  return reduce(sign * BigInt(whole + fraction), 10n ** BigInt(fraction.length));
}

function reduce(numerator: bigint, denominator: bigint): Rational {
  if (denominator < 0n) return reduce(-numerator, -denominator);
  let a = numerator < 0n ? -numerator : numerator;
  let b = denominator;
  while (b !== 0n) [a, b] = [b, a % b];
  const g = a === 0n ? 1n : a;
  return { numerator: numerator / g, denominator: denominator / g };
}

/** True when two answers are the same number exactly, or the same normalised text. */
export function answersMatch(predicted: string, reference: string): boolean {
  const a = parseRational(predicted);
  const b = parseRational(reference);
  if (a !== null && b !== null) return a.numerator === b.numerator && a.denominator === b.denominator;
  return normaliseAnswer(predicted) === normaliseAnswer(reference) && normaliseAnswer(reference) !== '';
}

/** 1 when the response's final answer equals the reference answer (see extractAnswer/extractReference), else 0. */
export function mathAccuracy(
  response: string,
  reference: string,
  extract: (text: string) => string | null = extractAnswer,
): number {
  const predicted = extract(response);
  return predicted !== null && answersMatch(predicted, extractReference(reference)) ? 1 : 0;
}
