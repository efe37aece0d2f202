// Qwen2.5-Math's answer normalisation (its grader's strip_string, as Trinity-RFT's math_eval_utils.py keeps it): the
// text of an answer cleaned so that equal answers written differently become the same string. In order:
//
//   "\\dfrac{3}{4}\\text{ cm}."    trailing ".", "\\!", "$", "%", \left/\right, \mbox{…}, \mathbf, ^\circ dropped;
//                                  dfrac/tfrac → frac, bmatrix/array → pmatrix, \neq/\leq/\geq → \ne/\le/\ge,
//                                  \{ \} → { }, \text{X} → X
//   "12 cm" → "12"                 unit words (mostly MathQA's: cm, feet, hour, percent, …, and single letters such
//                                  as "a", "m", "s") dropped where they stand as a word, twice over
//   "twenty one" → "21"            English number words read as a number (Python's word2number), the whole string
//   "x = 5" → "5"                  a one-letter "x =" prefix dropped
//   "2.50" stays, "3.00" → "3"     zeros after the point dropped; ".5" → "0.5"; "inf(inity)" → "\\infty"
//   "\\sqrt2" → "\\sqrt{2}", "\\frac12" → "\\frac{1}{2}", "3/4" → "\\frac{3}{4}"   (fix_sqrt, fix_fracs, fix_a_slash_b)
//   "(1,2)" → "1,2", "{5}" → "5"   one pair of outer () or {} dropped; spaces removed
//
// One deliberate difference: Trinity's copy removes "%" before "\\%", which leaves "50\\%" as "50\\" (never equal to
// 50); Qwen2.5-Math's own grader removes "\\%" first, as this does. Python's \w and \W are Unicode-aware; here they are
// letters, digits (any script) and "_" (WORD), as Python's str.isalnum() counts them.

/** Unit words removed by strip_string (Qwen2.5-Math's list, mostly MathQA's units), each also with an "s". */
const UNIT_WORDS_SINGULAR = (
  'east|degree|mph|kmph|ft|m sqaure| m east|sq m|deg|mile|q .|monkey|prime|ratio|profit of rs|rd|o|gm|' +
  'p . m|lb|tile|per|dm|lt|gain|ab|way|west|a .|b .|c .|d .|e .|f .|g .|h .|t|a|h|no change|men|' +
  'soldier|pie|bc|excess|st|inches|noon|percent|by|gal|kmh|c|acre|rise|a . m|th|π r 2|sq|mark|l|toy|' +
  'coin|sq . m|gallon|° f|profit|minw|yr|women|feet|am|pm|hr|cu cm|square|v â € ™|are|rupee|rounds|' +
  'cubic|cc|mtr|s|ohm|number|kmph|day|hour|minute|min|second|man|woman|sec|cube|mt|sq inch|mp|∏ cm ³|' +
  'hectare|more|sec|unit|cu . m|cm 2|rs .|rs|kg|g|month|km|m|cm|mm|apple|liter|loss|yard|pure|year|' +
  'increase|decrease|d|less|Surface|litre|pi sq m|s .|metre|meter|inch'
).split('|');

/** A word character as Python's re counts one in a str pattern. */
const WORD = '[\\p{L}\\p{N}_]';
const NOT_WORD = '[^\\p{L}\\p{N}_]';

/**
 * One pattern per unit, in the list's order (the words, then each with "s"): `(^|\W)unit($|\W)`, the unit text
 * taken as a regular expression as the source does ("q ." matches "q " and any character).
 */
const UNIT_PATTERNS: readonly RegExp[] = [...UNIT_WORDS_SINGULAR, ...UNIT_WORDS_SINGULAR.map((unit) => `${unit}s`)].map(
  (unit) => new RegExp(`(^|${NOT_WORD})${unit}($|${NOT_WORD})`, 'gu'),
);

/** English number words (word2number's american_number_system); `point` starts the decimals. */
const NUMBER_WORDS: Readonly<Record<string, number>> = Object.fromEntries([
  ...'zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen'
    .split(' ')
    .map((word, value) => [word, value]),
  ...'twenty thirty forty fifty sixty seventy eighty ninety'.split(' ').map((word, i) => [word, (i + 2) * 10]),
  ['hundred', 100],
  ['thousand', 1000],
  ['million', 1_000_000],
  ['billion', 1_000_000_000],
]);

/** word2number's number_formation: a group of up to four words below a thousand ("two hundred five" → 205). */
function wordGroupValue(words: readonly string[]): number {
  const n = words.map((word) => NUMBER_WORDS[word] as number);
  if (n.length === 0) throw new RangeError('empty number group');
  if (n.length === 4) return (n[0] as number) * (n[1] as number) + (n[2] as number) + (n[3] as number);
  if (n.length === 3) return (n[0] as number) * (n[1] as number) + (n[2] as number);
  if (n.length === 2) return n.includes(100) ? (n[0] as number) * (n[1] as number) : (n[0] as number) + (n[1] as number);
  return n[0] as number;
}

/**
 * Python word2number's word_to_num: the number the number words of `text` spell (every other word ignored), as the
 * text Python's str() prints; null where word2number raises (no number word, a repeated scale word, a malformed order).
 * A string of ASCII digits is that integer ("007" → "7").
 */
export function wordsToNumber(text: string): string | null {
  const sentence = text.replace(/-/g, ' ').toLowerCase();
  if (/^[0-9]+$/.test(sentence)) return BigInt(sentence).toString();
  let words = sentence
    .trim()
    .split(/\s+/)
    .filter((word) => Object.hasOwn(NUMBER_WORDS, word) || word === 'point');
  if (words.length === 0) return null;
  const count = (word: string) => words.filter((w) => w === word).length;
  if (['thousand', 'million', 'billion', 'point'].some((word) => count(word) > 1)) return null;
  let decimals: string[] = [];
  if (words.includes('point')) {
    decimals = words.slice(words.indexOf('point') + 1);
    words = words.slice(0, words.indexOf('point'));
  }
  const [billion, million, thousand] = ['billion', 'million', 'thousand'].map((word) => words.indexOf(word)) as [
    number,
    number,
    number,
  ];
  if ((thousand > -1 && (thousand < million || thousand < billion)) || (million > -1 && million < billion)) return null;
  let total = 0;
  try {
    if (words.length === 1) total = NUMBER_WORDS[words[0] as string] as number;
    else if (words.length > 1) {
      if (billion > -1) total += wordGroupValue(words.slice(0, billion)) * 1e9;
      if (million > -1) total += wordGroupValue(words.slice(billion + 1, million)) * 1e6;
      if (thousand > -1) total += wordGroupValue(words.slice(Math.max(million, billion) + 1, thousand)) * 1e3;
      // the words after the last scale word, as word2number picks them (a scale word that ends the text hands the
      // choice to the next one: "two million three thousand" counts "three thousand" again, as word2number does)
      const end = words.length - 1;
      if (thousand > -1 && thousand !== end) total += wordGroupValue(words.slice(thousand + 1));
      else if (million > -1 && million !== end) total += wordGroupValue(words.slice(million + 1));
      else if (billion > -1 && billion !== end) total += wordGroupValue(words.slice(billion + 1));
      else if (thousand === -1 && million === -1 && billion === -1) total += wordGroupValue(words);
    }
  } catch {
    return null; // word2number fails with an IndexError here (e.g. "billion" first): no conversion
  }
  const digits = decimals.map((word) => (Object.hasOwn(NUMBER_WORDS, word) ? (NUMBER_WORDS[word] as number) : 10));
  // decimals that are not all digit words add an integer 0 (the sum stays an int); digits add a float ("5.0", "2.25")
  if (decimals.length === 0 || digits.some((d) => d > 9)) return String(total);
  return pythonFloatText(total + Number(`0.${digits.join('')}`));
}

/** A float as Python's str() prints it ("5.0", "2.25"). */
function pythonFloatText(value: number): string {
  return Number.isInteger(value) ? `${value}.0` : String(value);
}

/** Python's int(text) printed back, or null where int() raises (sign, digits, "_" between digits, spaces around). */
function pythonIntText(text: string): string | null {
  const match = /^\s*([+-]?)(\d+(?:_\d+)*)\s*$/.exec(text);
  if (match === null) return null;
  const value = BigInt(`${match[1]}${(match[2] as string).replace(/_/g, '')}`);
  return value.toString();
}

/** fix_fracs: `\frac12` → `\frac{1}{2}`, `\frac1{2}` → `\frac{1}{2}`; a `\frac` with under two characters after it
 * leaves the whole string as it was. */
export function fixFracs(text: string): string {
  const [head, ...rest] = text.split('\\frac');
  let out = head as string;
  for (const part of rest) {
    out += '\\frac';
    if (part.startsWith('{')) out += part;
    else {
      if (part.length < 2) return text;
      const [a, b] = [part[0] as string, part[1] as string];
      out += b !== '{' ? `{${a}}{${b}}${part.slice(2)}` : `{${a}}${b}${part.slice(2)}`;
    }
  }
  return out;
}

/** fix_a_slash_b: "3/4" → "\frac{3}{4}" when both sides are integers as written (or hold "sqrt"). */
export function fixSlash(text: string): string {
  const parts = text.split('/');
  if (parts.length !== 2) return text;
  const [a, b] = parts.map((side) => (side.includes('sqrt') ? side : pythonIntText(side))) as [string | null, string | null];
  if (a === null || b === null || text !== `${a}/${b}`) return text;
  return `\\frac{${a}}{${b}}`;
}

/** fix_sqrt: `\sqrt2` → `\sqrt{2}`, `\sqrt x` → `\sqrt{x}` (the word after it braced). */
export function fixSqrt(text: string): string {
  if (!text.includes('\\sqrt')) return text;
  return text.replace(new RegExp(`\\\\sqrt\\s*(${WORD}+)`, 'gu'), '\\sqrt{$1}');
}

/** Removes the unit words (see the header), twice over; a removal that would leave nothing is skipped. */
function removeUnits(text: string): string {
  let out = text;
  for (let round = 0; round < 2; round++) {
    for (const pattern of UNIT_PATTERNS) {
      const removed = out.replace(pattern, '$1$2');
      if (removed !== '') out = removed;
    }
  }
  return out;
}

/** Qwen2.5-Math's strip_string (see the header); null when nothing is left. */
export function normaliseMathAnswer(answer: string): string | null {
  let s = answer.trim().replace(/\n/g, '').replace(/\.+$/, '');
  s = s.replaceAll('\\!', '').replaceAll('\\$', '').replaceAll('$', '').replaceAll('\\%', '').replaceAll('%', '');
  s = s.replace(/\\begin\{array\}\{.*?\}/g, '\\begin{pmatrix}').replace(/\\end\{array\}/g, '\\end{pmatrix}');
  s = s.replaceAll('bmatrix', 'pmatrix').replaceAll('tfrac', 'frac').replaceAll('dfrac', 'frac');
  s = s.replaceAll('\\neq', '\\ne').replaceAll('\\leq', '\\le').replaceAll('\\geq', '\\ge');
  s = s.replaceAll('\\left', '').replaceAll('\\right', '').replaceAll('\\{', '{').replaceAll('\\}', '}');
  s = s.replace(/\\mbox\{.*?\}/g, '').replaceAll('\\mathbf', '');
  s = s.replaceAll('^{\\circ}', '').replaceAll('^\\circ', '');
  s = s.replace(/\\text\{(.*?)\}/g, '$1');
  s = removeUnits(s);
  s = wordsToNumber(s) ?? s;
  s = s.replace(/^[a-zA-Z]\s*=\s*/, '');
  // as the source: "inf" inside the "\infty" just written is replaced too ("infinity" → "\\inftyty"), on both sides
  s = s.replaceAll('infinity', '\\infty').replaceAll('inf', '\\infty');
  s = s.replace(/(\d+)\.0+([^\d]|$)/g, '$1$2');
  s = s.replaceAll(' .', ' 0.').replaceAll('{.', '{0.');
  if (s.startsWith('.')) s = `0${s}`;
  s = s.replaceAll(' ', '');
  s = fixSlash(fixFracs(fixSqrt(s)));
  if ((s.startsWith('{') && s.endsWith('}')) || (s.startsWith('(') && s.endsWith(')'))) s = s.slice(1, -1);
  return s === '' ? null : s.trim();
}
