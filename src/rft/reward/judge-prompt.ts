// Judge prompts: templates with named placeholders, filled from the task and the response(s).
//
//   fillTemplate('Q: {question}\nA: {response}', { question: '2+2?', response: '4' })  →  'Q: 2+2?\nA: 4'
//
// Placeholders are Python str.format style, as Trinity-RFT's YAML templates are written: `{name}` is replaced, `{{`
// and `}}` are literal braces, and any other brace (an unknown name, a lone `{`) is an error naming it, found when the
// arguments are checked, not when the first judge call goes out.
import type { Task } from '../task.js';

const PLACEHOLDER = /\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|\{|\}/g;

/** Throws unless every placeholder of `template` is in `allowed` and every name in `required` occurs. */
export function checkTemplate(template: string, allowed: readonly string[], required: readonly string[], where: string): void {
  const used = new Set<string>();
  for (const match of template.matchAll(PLACEHOLDER)) {
    const token = match[0];
    if (token === '{{' || token === '}}') continue;
    const name = match[1];
    if (name === undefined)
      throw new Error(
        `${where}: lone '${token}' at offset ${match.index} of the template; write '${token}${token}' for a literal brace`,
      );
    if (!allowed.includes(name))
      throw new Error(
        `${where}: unknown placeholder {${name}} in the template; expected ${allowed.map((n) => `{${n}}`).join(', ')}`,
      );
    used.add(name);
  }
  for (const name of required) {
    if (!used.has(name)) throw new Error(`${where}: the template must contain {${name}}`);
  }
}

/** `template` with each `{name}` replaced by values[name] (checked with checkTemplate first). */
export function fillTemplate(template: string, values: Readonly<Record<string, string>>): string {
  return template.replace(PLACEHOLDER, (token, name: string | undefined) => {
    if (token === '{{') return '{';
    if (token === '}}') return '}';
    const value = name === undefined ? undefined : values[name];
    if (value === undefined) throw new Error(`template placeholder ${token} has no value`);
    return value;
  });
}

/** The task's question as a judge reads it: the prompt, or the conversation's turns (system turns left out). */
export function taskQuestion(task: Task, where: string): string {
  if (typeof task.prompt === 'string') return task.prompt;
  const turns = (task.messages ?? []).filter((turn) => turn.role !== 'system');
  if (turns.length === 1) return (turns[0] as { content: string }).content;
  if (turns.length > 0) return turns.map((turn) => `${turn.role}: ${turn.content}`).join('\n');
  throw new Error(`${where}: task ${task.id} has no prompt (the taskset's prompt_key) for the judge to read`);
}

/** Stands in for {reference} when the task has none. */
export const NO_REFERENCE = '(none given)';

/** The task's reference answer for a judge prompt, or NO_REFERENCE. */
export const taskReference = (task: Task): string =>
  typeof task.response === 'string' && task.response.trim() !== '' ? task.response : NO_REFERENCE;

/** A rubric must come from somewhere: `rubric`, or `rubric_key` (which, when given, takes precedence). */
export function checkRubricSource(options: { rubric: string; rubricKey: string }, where: string): void {
  if (options.rubricKey === '' && options.rubric.trim() === '')
    throw new Error(
      `${where}: argument 'rubric' (the grading criteria) or 'rubric_key' (a task column holding them) is required`,
    );
}

/**
 * One item of a rubric list as a line: a string as it is; a RaR-style criterion { description, weight?, title? }
 * (the RaR-Medicine rows upstream's judge examples read) as "(weight W) description"; any other object as JSON.
 */
function rubricItem(item: unknown): string {
  if (typeof item === 'string') return `- ${item}`;
  const { description, weight } = (item ?? {}) as { description?: unknown; weight?: unknown };
  if (typeof description === 'string') return `- ${weight === undefined ? '' : `(weight ${String(weight)}) `}${description}`;
  return `- ${JSON.stringify(item)}`;
}

/**
 * The rubric for a task: `rubric` from the arguments, or the task's own from column `rubricKey` of its row (a string,
 * or a list whose items become "- item" lines, see rubricItem). One of the two must be given.
 */
export function taskRubric(task: Task, options: { rubric: string; rubricKey: string }, where: string): string {
  if (options.rubricKey === '') return options.rubric;
  const value = task.raw[options.rubricKey];
  if (typeof value === 'string' && value.trim() !== '') return value;
  if (Array.isArray(value) && value.length > 0) return value.map(rubricItem).join('\n');
  throw new Error(
    `${where}: task ${task.id} has no rubric in column '${options.rubricKey}' (rubric_key); got ${JSON.stringify(value) ?? 'nothing'}`,
  );
}
