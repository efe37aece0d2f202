// A small parser and evaluator of math answers written in LaTeX or plain text, for symbolic answer comparison without
// a computer algebra system (./math-equal.ts's symbolicEqual; Qwen2.5-Math's grader uses sympy's parse_latex there).
//
//   parseMathExpression("\\frac{3\\pi}{4}")    → 3·π / 4          parseMathExpression("2x(x+1)") → 2·x·(x+1)
//   parseMathExpression("\\sqrt[3]{8}+x^{-1}") → 8^(1/3) + x^(−1)  parseMathExpression("y=2x+1")  → an equation
//   parseMathExpression("1,\\frac{1}{2}")      → a list of two     evaluate(expr, { x: 2 })       → a number
//
// Grammar (precedence low to high; juxtaposition is multiplication, as in "2x", "3\\sqrt{2}", "x(x+1)"):
//   answer   = relation ("," relation)*          relation = sum ("=" sum)?
//   sum      = term (("+" | "-") term)*          term     = signed (("*" | "/" | \cdot | \times | \div)? signed)*
//   signed   = ("-" | "+") signed | power        power    = postfix ("^" exponent)?      exponent = sign? postfix ("^" exponent)?
//   postfix  = primary "!"*
//   primary  = number | letter ("_" sub)? | \pi | \infty | \alpha… | (sum) | [sum] | {sum} | |sum| | \frac{a}{b}
//            | \sqrt{a} | \sqrt[n]{a} | \sin x, \cos^2 x, \ln(x), \log_{b} x, \exp … (a function of its next power)
// "**" is "^" (plain Python). A letter is one variable ("xy" is x·y, as parse_latex reads it); "e" is a variable, as
// sympify reads it (not Euler's number). Anything else (an unknown command, a stray brace) is not an expression: null.

/** A parsed expression: an arithmetic tree over numbers, variables and constants. */
export type MathExpr =
  | { kind: 'number'; value: number }
  | { kind: 'variable'; name: string }
  | { kind: 'negate'; arg: MathExpr }
  | { kind: 'binary'; op: '+' | '-' | '*' | '/' | '^'; left: MathExpr; right: MathExpr }
  | { kind: 'call'; fn: string; arg: MathExpr }
  | { kind: 'factorial'; arg: MathExpr };

/** A whole answer: an expression, an equation (left = right), or a list of answers. */
export type MathAnswer =
  | { kind: 'expression'; expr: MathExpr }
  | { kind: 'equation'; left: MathExpr; right: MathExpr }
  | { kind: 'list'; items: MathAnswer[] };

const FUNCTIONS: Readonly<Record<string, (x: number) => number>> = {
  sin: Math.sin,
  cos: Math.cos,
  tan: Math.tan,
  cot: (x) => 1 / Math.tan(x),
  sec: (x) => 1 / Math.cos(x),
  csc: (x) => 1 / Math.sin(x),
  arcsin: Math.asin,
  arccos: Math.acos,
  arctan: Math.atan,
  sinh: Math.sinh,
  cosh: Math.cosh,
  tanh: Math.tanh,
  ln: Math.log,
  log: Math.log,
  exp: Math.exp,
  abs: Math.abs,
  sqrt: Math.sqrt,
};

/** Commands that are constants; Greek letters other than π are variables. */
const CONSTANTS: Readonly<Record<string, number>> = { pi: Math.PI, infty: Number.POSITIVE_INFINITY };
const GREEK = new Set([
  ...'alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi rho sigma'.split(' '),
  ...'tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Sigma Phi Psi Omega'.split(' '),
]);
/** Spacing commands and symbols that mean nothing to the value. */
const SPACING = new Set([',', ';', ':', ' ', '!', 'quad', 'qquad', 'displaystyle']);
const UNICODE: Readonly<Record<string, string>> = { π: '\\pi', '∞': '\\infty', '×': '*', '·': '*', '÷': '/', '−': '-' };

type Token =
  | { type: 'number'; value: number }
  | { type: 'letter'; text: string }
  | { type: 'command'; name: string }
  | { type: 'symbol'; text: string };

function tokenize(source: string): Token[] | null {
  const tokens: Token[] = [];
  const text = [...source].map((ch) => UNICODE[ch] ?? ch).join('');
  for (let i = 0; i < text.length; ) {
    const rest = text.slice(i);
    const number = /^(?:\d+(?:\.\d*)?|\.\d+)/.exec(rest);
    if (number) {
      tokens.push({ type: 'number', value: Number(number[0]) });
      i += number[0].length;
      continue;
    }
    const command = /^\\([a-zA-Z]+|.)/.exec(rest);
    if (command) {
      const name = command[1] as string;
      if (!SPACING.has(name)) tokens.push({ type: 'command', name });
      i += command[0].length;
      continue;
    }
    const ch = text[i] as string;
    if (/[a-zA-Z]/.test(ch)) tokens.push({ type: 'letter', text: ch });
    else if (rest.startsWith('**')) {
      tokens.push({ type: 'symbol', text: '^' });
      i += 2;
      continue;
    } else if ('+-*/^()[]{}|=,!_'.includes(ch)) tokens.push({ type: 'symbol', text: ch });
    else if (!/\s/.test(ch)) return null;
    i += 1;
  }
  return tokens;
}

function tokenText(token: Token): string {
  if (token.type === 'number') return String(token.value);
  if (token.type === 'command') return `\\${token.name}`;
  return token.text;
}

class Parser {
  #at = 0;
  constructor(private readonly tokens: readonly Token[]) {}

  get done(): boolean {
    return this.#at >= this.tokens.length;
  }
  #peek(): Token | undefined {
    return this.tokens[this.#at];
  }
  #isSymbol(text: string): boolean {
    const token = this.#peek();
    return token?.type === 'symbol' && token.text === text;
  }
  #isCommand(...names: string[]): boolean {
    const token = this.#peek();
    return token?.type === 'command' && names.includes(token.name);
  }
  #expect(text: string): void {
    if (!this.#isSymbol(text)) throw new SyntaxError(`expected ${text}`);
    this.#at++;
  }

  answer(): MathAnswer {
    const items = [this.#relation()];
    while (this.#isSymbol(',')) {
      this.#at++;
      items.push(this.#relation());
    }
    if (!this.done) throw new SyntaxError('unexpected input');
    return items.length === 1 ? (items[0] as MathAnswer) : { kind: 'list', items };
  }

  #relation(): MathAnswer {
    const left = this.#sum();
    if (!this.#isSymbol('=')) return { kind: 'expression', expr: left };
    this.#at++;
    return { kind: 'equation', left, right: this.#sum() };
  }

  #sum(): MathExpr {
    let left = this.#term();
    while (this.#isSymbol('+') || this.#isSymbol('-')) {
      const op = (this.tokens[this.#at++] as { text: '+' | '-' }).text;
      left = { kind: 'binary', op, left, right: this.#term() };
    }
    return left;
  }

  #term(): MathExpr {
    let left = this.#signed();
    for (;;) {
      if (this.#isSymbol('*') || this.#isCommand('cdot', 'times')) {
        this.#at++;
        left = { kind: 'binary', op: '*', left, right: this.#signed() };
      } else if (this.#isSymbol('/') || this.#isCommand('div')) {
        this.#at++;
        left = { kind: 'binary', op: '/', left, right: this.#signed() };
      } else if (this.#startsPrimary()) {
        left = { kind: 'binary', op: '*', left, right: this.#power() };
      } else return left;
    }
  }

  /** Whether the next token begins a primary that multiplies by juxtaposition. */
  #startsPrimary(): boolean {
    const token = this.#peek();
    if (token === undefined) return false;
    if (token.type === 'symbol') return '([{'.includes(token.text);
    return !(token.type === 'command' && ['cdot', 'times', 'div'].includes(token.name));
  }

  #signed(): MathExpr {
    if (this.#isSymbol('-')) {
      this.#at++;
      return { kind: 'negate', arg: this.#signed() };
    }
    if (this.#isSymbol('+')) {
      this.#at++;
      return this.#signed();
    }
    return this.#power();
  }

  #power(): MathExpr {
    const base = this.#postfix();
    if (!this.#isSymbol('^')) return base;
    this.#at++;
    return { kind: 'binary', op: '^', left: base, right: this.#exponent() };
  }

  #exponent(): MathExpr {
    if (this.#isSymbol('-') || this.#isSymbol('+')) {
      const negative = (this.tokens[this.#at++] as { text: string }).text === '-';
      const arg = this.#exponent();
      return negative ? { kind: 'negate', arg } : arg;
    }
    return this.#power();
  }

  #postfix(): MathExpr {
    let expr = this.#primary();
    while (this.#isSymbol('!')) {
      this.#at++;
      expr = { kind: 'factorial', arg: expr };
    }
    return expr;
  }

  #group(open: string, close: string): MathExpr {
    this.#expect(open);
    const inner = this.#sum();
    this.#expect(close);
    return inner;
  }

  #primary(): MathExpr {
    const token = this.#peek();
    if (token === undefined) throw new SyntaxError('unexpected end');
    if (token.type === 'number') {
      this.#at++;
      return { kind: 'number', value: token.value };
    }
    if (token.type === 'letter') {
      this.#at++;
      return { kind: 'variable', name: token.text + this.#subscript() };
    }
    if (token.type === 'symbol') {
      if (token.text === '(') return this.#group('(', ')');
      if (token.text === '[') return this.#group('[', ']');
      if (token.text === '{') return this.#group('{', '}');
      if (token.text === '|') return { kind: 'call', fn: 'abs', arg: this.#group('|', '|') };
      throw new SyntaxError(`unexpected ${token.text}`);
    }
    this.#at++;
    const name = token.name;
    if (Object.hasOwn(CONSTANTS, name)) return { kind: 'variable', name: `\\${name}` };
    if (GREEK.has(name)) return { kind: 'variable', name: `\\${name}${this.#subscript()}` };
    if (name === 'frac') {
      const top = this.#group('{', '}');
      return { kind: 'binary', op: '/', left: top, right: this.#group('{', '}') };
    }
    if (name === 'sqrt') {
      const degree = this.#isSymbol('[') ? this.#group('[', ']') : { kind: 'number' as const, value: 2 };
      const radicand = this.#group('{', '}');
      return {
        kind: 'binary',
        op: '^',
        left: radicand,
        right: { kind: 'binary', op: '/', left: { kind: 'number', value: 1 }, right: degree },
      };
    }
    if (Object.hasOwn(FUNCTIONS, name)) return this.#call(name);
    throw new SyntaxError(`unknown command \\${name}`);
  }

  /** `_1`, `_{12}` after a variable: part of its name. */
  #subscript(): string {
    if (!this.#isSymbol('_')) return '';
    this.#at++;
    const token = this.#peek();
    if (token?.type === 'number' || token?.type === 'letter') {
      this.#at++;
      return `_${token.type === 'number' ? token.value : token.text}`;
    }
    const start = this.#at;
    this.#group('{', '}');
    return `_${this.tokens.slice(start, this.#at).map(tokenText).join('')}`;
  }

  /** \sin x, \sin^2 x (= (sin x)^2), \log_{b} x (= ln x / ln b), \ln(x). */
  #call(fn: string): MathExpr {
    let base: MathExpr | null = null;
    if (fn === 'log' && this.#isSymbol('_')) {
      this.#at++;
      base = this.#postfix();
    }
    let power: MathExpr | null = null;
    if (this.#isSymbol('^')) {
      this.#at++;
      power = this.#exponent();
    }
    let expr: MathExpr = { kind: 'call', fn, arg: this.#power() };
    if (base !== null) expr = { kind: 'binary', op: '/', left: expr, right: { kind: 'call', fn: 'ln', arg: base } };
    return power === null ? expr : { kind: 'binary', op: '^', left: expr, right: power };
  }
}

/** The answer `text` parses to (see the header), or null when it is not an expression this grammar reads. */
export function parseMathExpression(text: string): MathAnswer | null {
  const tokens = tokenize(text);
  if (tokens === null || tokens.length === 0) return null;
  try {
    return new Parser(tokens).answer();
  } catch (error) {
    if (error instanceof SyntaxError) return null;
    throw error;
  }
}

/** n! for a whole number (Infinity past 170!, where a double overflows); NaN otherwise (sympy leaves those symbolic). */
function factorial(n: number): number {
  if (!Number.isInteger(n) || n < 0) return Number.NaN;
  if (n > 170) return Number.POSITIVE_INFINITY;
  let out = 1;
  for (let k = 2; k <= n; k++) out *= k;
  return out;
}

/** The value of `expr` with each variable's value from `values` (NaN for one it lacks; constants are built in). */
export function evaluate(expr: MathExpr, values: Readonly<Record<string, number>> = {}): number {
  switch (expr.kind) {
    case 'number':
      return expr.value;
    case 'variable': {
      const constant = expr.name.startsWith('\\') ? CONSTANTS[expr.name.slice(1)] : undefined;
      return constant ?? values[expr.name] ?? Number.NaN;
    }
    case 'negate':
      return -evaluate(expr.arg, values);
    case 'factorial':
      return factorial(evaluate(expr.arg, values));
    case 'call':
      return (FUNCTIONS[expr.fn] as (x: number) => number)(evaluate(expr.arg, values));
    case 'binary': {
      const a = evaluate(expr.left, values);
      const b = evaluate(expr.right, values);
      if (expr.op === '+') return a + b;
      if (expr.op === '-') return a - b;
      if (expr.op === '*') return a * b;
      if (expr.op === '/') return a / b;
      // a negative base to a fractional power is complex (sympy's principal root: ∛−8 = 1 + 1.73i), not a real
      // number to compare: NaN, as JavaScript's ** gives
      return a ** b;
    }
  }
}

/** The variables of an expression (constants such as \pi excluded). */
export function variablesOf(expr: MathExpr, into: Set<string> = new Set()): Set<string> {
  if (expr.kind === 'variable' && !(expr.name.startsWith('\\') && Object.hasOwn(CONSTANTS, expr.name.slice(1))))
    into.add(expr.name);
  else if (expr.kind === 'binary') {
    variablesOf(expr.left, into);
    variablesOf(expr.right, into);
  } else if (expr.kind === 'negate' || expr.kind === 'call' || expr.kind === 'factorial') variablesOf(expr.arg, into);
  return into;
}
