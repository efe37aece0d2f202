// The served tool agent's own tools, as any OpenAI-API agent carries them: their JSON schemas for `tools` in chat
// completions, and the code that runs a call. Nothing here knows of this project (it is the agent's code, not the
// trainer's): the in-process tool_agent_workflow (src/rft/workflow/agents) has its own, richer pair; these two give
// the same results on the calls the expert conversations make (examples/tool_agent/data/sft.jsonl), which is what
// the SFT warm start teaches.
//
//   lookup(query)       the document keyed `query` (case-insensitive) from a JSON file of [{key, text}]:
//                       "Krelqueth: population 6287"; anything else: "no match"
//   calc(expression)    + - * / and parentheses over decimal numbers, the usual precedence; integers print plainly,
//                       other results to 10 significant digits; a malformed expression: "error: ..."
import { readFileSync } from 'node:fs';
import type OpenAI from 'openai';

export const TOOLS: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'calc',
      description: 'Evaluate an arithmetic expression: numbers, + - * / and parentheses.',
      parameters: {
        type: 'object',
        properties: { expression: { type: 'string', description: 'e.g. 4821+310' } },
        required: ['expression'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'lookup',
      description: 'Look up a place by name: its population.',
      parameters: {
        type: 'object',
        properties: { query: { type: 'string', description: 'a name, e.g. Varnia' } },
        required: ['query'],
      },
    },
  },
];

/** lookup's answer for a query that names no document. */
export const NO_MATCH = 'no match';

/** The documents lookup reads, by lower-cased key. */
export type Documents = ReadonlyMap<string, string>;

/** Reads a JSON file of [{key, text}]; errors name the file and the entry. */
export function loadDocuments(file: string): Documents {
  const entries: unknown = JSON.parse(readFileSync(file, 'utf8'));
  if (!Array.isArray(entries)) throw new Error(`${file}: expected a JSON array of {key, text}`);
  const documents = new Map<string, string>();
  entries.forEach((entry, i) => {
    const { key, text } = (entry ?? {}) as { key?: unknown; text?: unknown };
    if (typeof key !== 'string' || typeof text !== 'string') throw new Error(`${file}: entry ${i} is not {key, text}`);
    documents.set(key.trim().toLowerCase(), text);
  });
  return documents;
}

/** calc's arithmetic: expression := term (('+'|'-') term)*, term := factor (('*'|'/') factor)*, factor := number |
 * '-' factor | '(' expression ')'. Throws on anything else. */
export function calculate(expression: string): number {
  const tokens = expression.match(/\d+(?:\.\d+)?|[-+*/()]|\S/g) ?? [];
  let at = 0;
  const take = () => tokens[at++];
  const factor = (): number => {
    const token = take();
    if (token === '-') return -factor();
    if (token === '(') {
      const value = sum();
      if (take() !== ')') throw new Error("missing ')'");
      return value;
    }
    if (token !== undefined && /^\d/.test(token)) return Number(token);
    throw new Error(token === undefined ? 'unexpected end' : `unexpected '${token}'`);
  };
  const product = (): number => {
    let value = factor();
    while (tokens[at] === '*' || tokens[at] === '/') value = take() === '*' ? value * factor() : value / factor();
    return value;
  };
  const sum = (): number => {
    let value = product();
    while (tokens[at] === '+' || tokens[at] === '-') value = take() === '+' ? value + product() : value - product();
    return value;
  };
  const value = sum();
  if (at < tokens.length) throw new Error(`unexpected '${tokens[at]}'`);
  if (!Number.isFinite(value)) throw new Error('the result is not a finite number');
  return value;
}

/** A number as calc prints it (see the header). */
export const formatResult = (value: number): string =>
  Number.isInteger(value) ? String(value === 0 ? 0 : value) : String(Number(value.toPrecision(10)));

/** Runs one tool call as the API gives it (a name and JSON arguments); `valid` is false for a call that failed. */
export function runTool(call: { name: string; arguments: string }, documents: Documents): { content: string; valid: boolean } {
  let args: Record<string, unknown>;
  try {
    args = JSON.parse(call.arguments) as Record<string, unknown>;
  } catch {
    return { content: 'error: arguments are not JSON', valid: false };
  }
  if (call.name === 'lookup' && typeof args?.query === 'string')
    return { content: documents.get(args.query.trim().toLowerCase()) ?? NO_MATCH, valid: true };
  if (call.name === 'calc' && typeof args?.expression === 'string') {
    try {
      return { content: formatResult(calculate(args.expression)), valid: true };
    } catch (error) {
      return { content: `error: ${(error as Error).message}`, valid: false };
    }
  }
  return { content: `error: no tool ${call.name} with these arguments`, valid: false };
}
