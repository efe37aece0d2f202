// Qwen2.5-Math's answer grader (src/rft/reward/math-equal.ts, qwen-math-normalise.ts, math-expression.ts): the
// expected verdicts are Trinity-RFT's own test cases and cases derived by hand from its math_eval_utils.py, each with
// the step of the source that decides it.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  extractMathAnswer,
  mathEqual,
  pythonFloat,
  symbolicEqual,
  verifyMathAnswer,
} from '../../../src/rft/reward/math-equal.js';
import { evaluate, parseMathExpression } from '../../../src/rft/reward/math-expression.js';
import { fixFracs, fixSlash, fixSqrt, normaliseMathAnswer, wordsToNumber } from '../../../src/rft/reward/qwen-math-normalise.js';

const boxed = (answer: string) => `so the result is \\boxed{${answer}}`;
/** The verdict on a boxed prediction against a boxed reference (MATH's solutions box their answers). */
const grade = (prediction: string, reference: string) => verifyMathAnswer(boxed(prediction), boxed(reference)).accuracy;

describe("Trinity-RFT's test_math_eval_workflow replies", () => {
  // The Python test writes "\boxed" in plain strings, where "\b" is a backspace: the replies hold no "boxed" at all,
  // so the grader falls back to "the answer is …" and to the last number. JavaScript's "\b" is the same backspace.
  test('accuracy 1, 1, 0, 0 against the reference 36', () => {
    const replies = [
      'My step-by-step reasoning leads to the answer \boxed{36}', // last number: 36
      'Here is the answer of \boxed{36.0}', // last number 36.0 = 36
      'I made a mistake, the answer is \boxed{42}', // "the answer is" → "\boxed{42}" (not 36)
      'The answer is 36, but I forgot the box.', // "the answer is" → "36,butIforgotthebox" (not a number)
    ];
    assert.deepEqual(
      replies.map((reply) => verifyMathAnswer(reply, '36').accuracy),
      [1, 1, 0, 0],
    );
  });
});

describe('extractMathAnswer', () => {
  test('the last boxed answer, braces balanced, then normalised', () => {
    assert.equal(extractMathAnswer('first \\boxed{1}, finally \\boxed{\\dfrac{1}{2}}.'), '\\frac{1}{2}');
    assert.equal(extractMathAnswer('\\boxed{\\{1, 2\\}}'), '1,2', 'outer braces dropped by strip_string');
    // unbalanced: the text up to the next "$" or "}"
    assert.equal(extractMathAnswer('$\\boxed 7$ and more'), '7');
    assert.equal(extractMathAnswer('ends with boxed'), null, 'nothing after the last "boxed"');
  });

  test('"the answer is" / "final answer is" / 答案是 on its line, a trailing "." dropped; else the last number', () => {
    assert.equal(extractMathAnswer('Thus the final answer is: 12.\nDone'), '12');
    assert.equal(extractMathAnswer('答案是 5'), '5');
    assert.equal(extractMathAnswer('We get 1,234 apples and then 17 pears'), '17');
    assert.equal(extractMathAnswer('We get 1,234 apples'), '1234', 'commas removed before the last number');
    assert.equal(extractMathAnswer('no number here'), null);
    // a reference without a box is read the same way: its last number
    assert.equal(extractMathAnswer('Natalia sold 48/2 = 24 clips in May.\n#### 72'), '72');
  });
});

describe("normaliseMathAnswer (Qwen2.5-Math's strip_string)", () => {
  test('LaTeX wrappers, units, prefixes and zeros', () => {
    const cases: [string, string | null][] = [
      ['\\dfrac{3}{4}.', '\\frac{3}{4}'],
      ['\\left( 1, 2 \\right)', '1,2'], // \left/\right, spaces, then one pair of outer () dropped
      ['12 \\text{ cm}', '12'], // \text{ cm} → " cm", the unit "cm" dropped
      ['90^\\circ', '90'],
      ['\\$5.00', '5'], // "\$" dropped, then "5.00" → "5"
      ['x = 5', '5'],
      ['.5', '0.5'],
      ['3/4', '\\frac{3}{4}'],
      ['03/4', '03/4'], // int("03") prints "3": not "a/b" as written, left alone
      ['\\sqrt2', '\\sqrt{2}'],
      ['\\frac12', '\\frac{1}{2}'],
      ['\\begin{bmatrix}1&2\\end{bmatrix}', '\\begin{pmatrix}1&2\\end{pmatrix}'],
      ['x \\leq 3', 'x\\le3'],
      ['50\\%', '50'], // Qwen2.5-Math's order ("\%" before "%"); Trinity's copy would leave "50\"
      ['twenty one', '21'],
      ['007', '7'], // word2number reads a digit string as an int
      ['$$', null],
    ];
    for (const [input, expected] of cases) assert.equal(normaliseMathAnswer(input), expected, input);
  });

  test('unit words go where they stand as words, as the source does ("a + b" loses its "a +")', () => {
    // the unit "a ." comes before "a" in the list, and its "." is a regex wildcard: "a +" and the space go
    assert.equal(normaliseMathAnswer('a + b'), 'b');
    assert.equal(normaliseMathAnswer('5 m'), '5');
    assert.equal(normaliseMathAnswer('m'), 'm', 'a removal that would leave nothing is skipped');
  });

  test("word2number's reading of number words", () => {
    assert.equal(wordsToNumber('two hundred five'), '205');
    assert.equal(wordsToNumber('one million two hundred thousand five'), '1200005');
    assert.equal(wordsToNumber('three point one four'), '3.14');
    assert.equal(wordsToNumber('five point'), '5');
    assert.equal(wordsToNumber('x plus y'), null);
    assert.equal(wordsToNumber('one thousand one thousand'), null, 'a repeated scale word raises in word2number');
    assert.equal(wordsToNumber('constructor'), null, 'only number words count');
  });

  test('fix_fracs, fix_a_slash_b and fix_sqrt', () => {
    assert.equal(fixFracs('\\frac1{2}+\\frac34'), '\\frac{1}{2}+\\frac{3}{4}');
    assert.equal(fixFracs('\\frac1'), '\\frac1', 'under two characters after \\frac: left as it was');
    assert.equal(fixSlash('-3/4'), '\\frac{-3}{4}');
    assert.equal(fixSlash('\\sqrt{2}/2'), '\\frac{\\sqrt{2}}{2}');
    assert.equal(fixSlash('1/2/3'), '1/2/3');
    assert.equal(fixSqrt('2\\sqrt 3x'), '2\\sqrt{3x}');
  });
});

describe('mathEqual', () => {
  test('numbers: within 1e-4 relative, and as percentages (r, r/100, r·100)', () => {
    assert.equal(grade('36.0', '36'), 1);
    assert.equal(grade('1,000', '1000'), 1);
    assert.equal(grade('3.0001', '3'), 1);
    assert.equal(grade('3.001', '3'), 0, '3.3e-4 relative is over 1e-4: a verdict, no symbolic fallback');
    assert.equal(grade('0.5', '50'), 1, '50 read as a percentage');
    assert.equal(grade('5000', '50'), 1);
    assert.equal(grade('50\\%', '50'), 1);
    assert.equal(grade('0', '0.00001'), 0, 'no absolute tolerance (isclose abs_tol 0)');
    assert.equal(grade('1e3', '1000'), 1, "Python's float() reads 1e3");
  });

  test("Python's float() as _is_digit reads it", () => {
    assert.equal(pythonFloat(' 1_000.5 '), 1000.5);
    assert.equal(pythonFloat('-inf'), Number.NEGATIVE_INFINITY);
    assert.ok(Number.isNaN(pythonFloat('nan') as number));
    assert.equal(pythonFloat('1/2'), null);
    assert.equal(pythonFloat('1__0'), null);
  });

  test('fractions, roots and π by value', () => {
    assert.equal(grade('\\dfrac{1}{2}', '0.5'), 1);
    assert.equal(grade('\\frac{\\sqrt{3}}{2}', '0.8660'), 1);
    assert.equal(grade('\\frac{\\sqrt{3}}{2}', '0.87'), 0);
    assert.equal(grade('2\\sqrt{3}', '\\sqrt{12}'), 1);
    assert.equal(grade('\\frac{3\\pi}{4}', '\\frac34\\pi'), 1);
    assert.equal(grade('\\pi', '3.1416'), 1);
    assert.equal(grade('10^{-2}', '0.01'), 1);
    assert.equal(grade('2^10', '1024'), 1);
    assert.equal(grade('\\sqrt[3]{27}', '3'), 1);
    assert.equal(grade('5!', '120'), 1);
    assert.equal(grade('\\frac{1}{3}', '0.33'), 0);
  });

  test('expressions with variables: equal at seeded points', () => {
    assert.equal(grade('x+1', '1+x'), 1);
    assert.equal(grade('x+1', 'x+2'), 0);
    assert.equal(grade('2x^2-2', '2(x+1)\\cdot(x-1)'), 1);
    assert.equal(grade('\\sin^2x+\\cos^2x', '1'), 1);
    assert.equal(grade('2x(x+1)', '2x^2+2x'), 1);
    assert.equal(grade('\\frac{x}{2}', 'x/2'), 1);
    assert.equal(grade('e^x', 'e^{x}'), 1);
    assert.equal(grade('x^2', 'x^3'), 0);
    // the documented difference from sympy (symbols complex there): equal at the real points in [0.5, 3)
    assert.equal(grade('\\sqrt{x^2}', 'x'), 1);
    // strip_string drops one pair of outer brackets first: "(x-1)(x+1)" becomes "x-1)(x+1", which no parser reads
    assert.equal(grade('x^2-1', '(x-1)(x+1)'), 0);
  });

  test('bracketed lists and intervals element-wise; bare lists item by item', () => {
    assert.equal(grade('[1,2)', '[1, 2)'), 1);
    assert.equal(grade('[\\frac{1}{2}, 3)', '[0.5,3)'), 1);
    assert.equal(grade('[1,2)', '[1,3)'), 0);
    assert.equal(grade('(1,2)', '\\{1,2\\}'), 1, 'both become "1,2"');
    assert.equal(grade('\\frac{1}{2},3', '0.5,3'), 1);
    assert.equal(grade('1,2', '2,1'), 0);
  });

  test('matrices element-wise, bmatrix read as pmatrix', () => {
    const m = (a: string) => `\\begin{pmatrix}1&${a}\\\\3&4\\end{pmatrix}`;
    assert.equal(grade(m('2'), '\\begin{bmatrix}1&2.0\\\\3&4\\end{bmatrix}'), 1);
    assert.equal(grade(m('\\frac{1}{2}'), m('0.5')), 1);
    assert.equal(grade(m('2'), m('5')), 0);
  });

  test('equations: (lhs)−(rhs) symbolically, or "x = value" against a value', () => {
    assert.equal(mathEqual('y=2x+1', 'y-2x=1'), true);
    assert.equal(mathEqual('2y=4x+2', 'y-2x=1'), false, 'the differences are not equal (a factor 2)');
    assert.equal(mathEqual('k=3', '3'), true);
    assert.equal(mathEqual('abc=3', '3'), false, 'a name over 2 characters');
    assert.equal(grade('x=3', '3'), 1, 'strip_string already drops a one-letter "x="');
  });

  test('unparseable answers are equal only as the same string', () => {
    assert.equal(grade('\\text{East}', '\\text{East}'), 1);
    assert.equal(grade('\\text{North}', '\\text{South}'), 0);
    assert.equal(symbolicEqual('\\binom{5}{2}', '10'), false);
    // equations whose sides do not parse: equal when the differences are the same text (sympy compares the strings)
    assert.equal(mathEqual('\\binom{n}{2}=m', '\\binom{n}{2} = m'), true);
    assert.equal(mathEqual(null, '1'), false);
    assert.equal(grade('\\infty', '\\infty'), 1);
  });
});

describe('parseMathExpression', () => {
  test('juxtaposition, powers, functions and signs', () => {
    const value = (text: string, x = 2) => {
      const parsed = parseMathExpression(text);
      assert.ok(parsed?.kind === 'expression', text);
      return evaluate(parsed.expr, { x });
    };
    assert.equal(value('2x(x+1)'), 12);
    assert.equal(value('-x^2'), -4, 'the power binds before the sign');
    assert.equal(value('2^-1'), 0.5);
    assert.equal(value('x**3'), 8);
    assert.equal(value('|1-x|'), 1);
    assert.equal(value('1000000000!'), Number.POSITIVE_INFINITY, 'a huge factorial overflows at once, not after 1e9 steps');
    assert.equal(value('\\log_{2}8'), 3);
    assert.ok(Math.abs(value('\\sqrt[3]{x^3}') - 2) < 1e-12);
    assert.ok(Number.isNaN(value('\\sqrt[3]{-8}')), 'a negative base to a fractional power is complex, as in sympy');
    assert.equal(parseMathExpression('\\unknown{3}'), null);
    assert.equal(parseMathExpression('(1+2'), null);
  });
});
