// Generates the tool agent example's data: questions about the built-in document set (fictional places and their
// populations) that need a lookup and arithmetic, in three disjoint sets (no question appears in two of them).
//   sft.jsonl    expert demonstrations: whole tool-using conversations as chat messages (multi-turn SFT)
//   train.jsonl  questions for GRPO ({prompt, response}; tool_agent_workflow plays them)
//   eval.jsonl   held-out questions, never trained on
// Three kinds of question (the expert's moves in brackets):
//   Population of Varnia plus Quell?    [lookup Varnia, lookup Quell] [calc 4821+310] 5131
//   Population of Varnia minus Quell?   [lookup Varnia, lookup Quell] [calc 4821-310] 4511
//   Population of Varnia times 3?       [lookup Varnia] [calc 4821*3] 14463
// Usage: node --import tsx examples/tool_agent/make-data.ts OUT_DIR [--train N] [--eval N] [--sft N] [--seed N]
import { parseArgs } from 'node:util';
import {
  builtInDocuments,
  type ChatTurn,
  type DocumentStore,
  runToolCall,
  seededRandom,
  TOOL_AGENT_TOOLS,
  writeJsonlSets,
} from 'trinity-rft/rft';

/**
 * The system turn the chat template renders for the tools (the character tokenizer's template lists their names):
 * SFT rows carry it as a plain system message because SFT datasets have no `tools` column.
 */
export const TOOLS_SYSTEM_TURN = `tools: ${TOOL_AGENT_TOOLS.map((t) => (t.type === 'function' ? t.function.name : '')).join(' ')}`;

export interface ToolQuestion {
  kind: 'plus' | 'minus' | 'times';
  places: string[];
  /** The multiplier of a 'times' question. */
  factor?: number;
}

const populationOf = (documents: DocumentStore, place: string): number => {
  const match = /population (\d+)/.exec(documents.get(place)?.text ?? '');
  if (match === null) throw new Error(`no population for '${place}'`);
  return Number(match[1]);
};

export function questionText(q: ToolQuestion): string {
  const [a, b] = q.places;
  return q.kind === 'times' ? `Population of ${a} times ${q.factor}?` : `Population of ${a} ${q.kind} ${b}?`;
}

function expression(q: ToolQuestion, documents: DocumentStore): string {
  const [a, b] = q.places.map((place) => populationOf(documents, place));
  return q.kind === 'plus' ? `${a}+${b}` : q.kind === 'minus' ? `${a}-${b}` : `${a}*${q.factor}`;
}

/** The expert's whole conversation (see the header): system tools turn, question, tool calls, results, answer. */
export function expertDemonstration(q: ToolQuestion, documents: DocumentStore = builtInDocuments()): ChatTurn[] {
  let id = 0;
  const messages: ChatTurn[] = [
    { role: 'system', content: TOOLS_SYSTEM_TURN },
    { role: 'user', content: questionText(q) },
  ];
  const callTools = (calls: Array<{ name: string; args: Record<string, string> }>): string => {
    const made = calls.map((c) => ({
      id: `call_${id++}`,
      type: 'function' as const,
      function: { name: c.name, arguments: JSON.stringify(c.args) },
    }));
    messages.push({ role: 'assistant', content: '', tool_calls: made } as ChatTurn);
    let last = '';
    for (const call of made) {
      last = runToolCall(call.function, documents).content;
      messages.push({ role: 'tool', tool_call_id: call.id, content: last } as ChatTurn);
    }
    return last;
  };
  callTools(q.places.map((place) => ({ name: 'lookup', args: { query: place } })));
  const answer = callTools([{ name: 'calc', args: { expression: expression(q, documents) } }]);
  messages.push({ role: 'assistant', content: answer });
  return messages;
}

/** The reference answer. */
export function answerOf(q: ToolQuestion, documents: DocumentStore = builtInDocuments()): string {
  const [a = 0, b = 0] = q.places.map((place) => populationOf(documents, place));
  return String(q.kind === 'plus' ? a + b : q.kind === 'minus' ? a - b : a * (q.factor ?? 1));
}

export function makeToolAgentData(options: { train: number; eval: number; sft: number; seed: number }) {
  const documents = builtInDocuments();
  const places = documents.documents.map((d) => d.key);
  const random = seededRandom(options.seed, 0x7001);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
  const seen = new Set<string>();
  const draw = (count: number): ToolQuestion[] => {
    const out: ToolQuestion[] = [];
    while (out.length < count) {
      const r = random();
      const kind = r < 0.4 ? 'plus' : r < 0.7 ? 'minus' : 'times';
      const a = pick(places);
      let b = pick(places);
      while (b === a) b = pick(places);
      const q: ToolQuestion =
        kind === 'times' ? { kind, places: [a], factor: 2 + Math.floor(random() * 8) } : { kind, places: [a, b] };
      const text = questionText(q);
      if (seen.has(text)) continue;
      seen.add(text);
      out.push(q);
    }
    return out;
  };
  const asTask = (q: ToolQuestion) => ({ prompt: questionText(q), response: answerOf(q, documents) });
  const evalSet = draw(options.eval);
  const train = draw(options.train);
  const sft = draw(options.sft);
  return {
    eval: evalSet.map(asTask),
    train: train.map(asTask),
    sft: sft.map((q) => ({ messages: expertDemonstration(q, documents) })),
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      train: { type: 'string', default: '1000' },
      eval: { type: 'string', default: '100' },
      sft: { type: 'string', default: '2000' },
      seed: { type: 'string', default: '0' },
    },
  });
  const out = positionals[0];
  if (!out) throw new Error('usage: make-data.ts OUT_DIR [--train N] [--eval N] [--sft N] [--seed N]');
  const data = makeToolAgentData({
    train: Number(values.train),
    eval: Number(values.eval),
    sft: Number(values.sft),
    seed: Number(values.seed),
  });
  writeJsonlSets(out, data);
  console.log(
    `wrote ${out}: ${data.sft.length} expert conversations, ${data.train.length} GRPO questions, ${data.eval.length} eval questions`,
  );
}
