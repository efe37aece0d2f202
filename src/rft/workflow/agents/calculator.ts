// The tool agent's calculator: arithmetic expressions evaluated by a small recursive-descent parser (never eval).
//
//   expression := term (('+' | '-') term)*
//   term       := unary (('*' | '/' | '%') unary)*
//   unary      := ('+' | '-') unary | power
//   power      := primary ('^' unary)?                 (right-associative: 2^3^2 = 2^9)
//   primary    := number | '(' expression ')'
//   number     := digits ('.' digits)? | '.' digits    (commas and underscores between digits allowed: 4,821)
//
// Anything else (names, calls, brackets other than parentheses, quotes) is a syntax error. Limits keep hostile input
// cheap: at most MAX_EXPRESSION_LENGTH characters, MAX_DEPTH nested parentheses/unary signs; division by zero and
// non-finite results are errors. Results are rounded to 10 significant decimals so 0.1+0.2 prints as 0.3.

export const MAX_EXPRESSION_LENGTH = 200;
export const MAX_DEPTH = 32;

export class CalculatorError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CalculatorError';
  }
}

type Token = { kind: 'number'; value: number; at: number } | { kind: 'op'; value: string; at: number };

function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < source.length) {
    const c = source[i] as string;
    if (c === ' ' || c === '\t' || c === '\n') {
      i++;
    } else if ('+-*/%^()'.includes(c)) {
      tokens.push({ kind: 'op', value: c, at: i });
      i++;
    } else if ((c >= '0' && c <= '9') || c === '.') {
      const match = /^(?:\d(?:[\d,_]*\d)?(?:\.\d+)?|\.\d+)/.exec(source.slice(i));
      if (match === null) throw new CalculatorError(`bad number at position ${i}`);
      const text = match[0];
      if (/[,_]{2}/.test(text)) throw new CalculatorError(`bad number '${text}' at position ${i}`);
      tokens.push({ kind: 'number', value: Number(text.replace(/[,_]/g, '')), at: i });
      i += text.length;
    } else {
      throw new CalculatorError(`unexpected '${c}' at position ${i}`);
    }
  }
  return tokens;
}

/** Evaluates an arithmetic expression (see the header); throws CalculatorError on anything else. */
export function evaluateExpression(source: string): number {
  if (typeof source !== 'string') throw new CalculatorError('the expression must be a string');
  if (source.length > MAX_EXPRESSION_LENGTH)
    throw new CalculatorError(`the expression is longer than ${MAX_EXPRESSION_LENGTH} characters`);
  const tokens = tokenize(source);
  if (tokens.length === 0) throw new CalculatorError('empty expression');
  let pos = 0;
  let depth = 0;
  const peek = (): Token | undefined => tokens[pos];
  const isOp = (value: string) => {
    const token = peek();
    return token?.kind === 'op' && token.value === value;
  };
  const nest = <T>(fn: () => T): T => {
    if (++depth > MAX_DEPTH) throw new CalculatorError(`nested deeper than ${MAX_DEPTH} levels`);
    try {
      return fn();
    } finally {
      depth--;
    }
  };

  const expression = (): number => {
    let value = term();
    while (isOp('+') || isOp('-')) {
      const op = (tokens[pos++] as Token).value;
      const right = term();
      value = op === '+' ? value + right : value - right;
    }
    return value;
  };
  const term = (): number => {
    let value = unary();
    while (isOp('*') || isOp('/') || isOp('%')) {
      const op = (tokens[pos++] as Token).value;
      const right = unary();
      if ((op === '/' || op === '%') && right === 0) throw new CalculatorError('division by zero');
      value = op === '*' ? value * right : op === '/' ? value / right : value % right;
    }
    return value;
  };
  const unary = (): number =>
    nest(() => {
      if (isOp('-')) {
        pos++;
        return -unary();
      }
      if (isOp('+')) {
        pos++;
        return unary();
      }
      return power();
    });
  const power = (): number => {
    const base = primary();
    if (!isOp('^')) return base;
    pos++;
    return base ** unary();
  };
  const primary = (): number => {
    const token = peek();
    if (token === undefined) throw new CalculatorError('unexpected end of expression');
    if (token.kind === 'number') {
      pos++;
      return token.value;
    }
    if (token.value === '(') {
      pos++;
      const value = nest(expression);
      if (!isOp(')')) throw new CalculatorError(`missing ')' for '(' at position ${token.at}`);
      pos++;
      return value;
    }
    throw new CalculatorError(`unexpected '${token.value}' at position ${token.at}`);
  };

  const value = expression();
  const rest = peek();
  if (rest !== undefined) throw new CalculatorError(`unexpected '${rest.value}' at position ${rest.at}`);
  if (!Number.isFinite(value)) throw new CalculatorError('the result is not a finite number');
  return value;
}

/** A result as the tool returns it: integers plainly, other numbers to 10 significant decimals (0.1+0.2 → 0.3). */
export function formatNumber(value: number): string {
  if (Number.isInteger(value)) return Object.is(value, -0) ? '0' : String(value);
  return String(Number(value.toPrecision(10)));
}
