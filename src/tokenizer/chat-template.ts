// A model's chat template (tokenizer_config.json's Jinja), rendered under a budget.
//
// The template is code that came with the model folder, and @huggingface/jinja runs it synchronously on the calling
// thread: a template with a large loop would hold `trinity serve`'s event loop (no /health, no other request) until
// the heap ran out. So every render counts its work and stops at the first limit it crosses:
//
//   steps    interpreter evaluations (each node, each block: each loop pass) ≤ maxSteps
//   time     wall-clock milliseconds since the render began                  ≤ maxMillis (checked every 256 steps)
//   output   characters of any string a step produces (the result included)  ≤ maxOutputChars
//            items of any list a step produces, and of range(...) before it   ≤ maxListItems
//            is built (the one builtin that allocates in proportion to a number the template chooses)
//
// The count lives in the interpreter itself (every node goes through its evaluate, every block through its
// evaluateBlock): a render here is Template.render's four lines with a subclass of the library's Interpreter that
// charges a meter, over the library's own global scope, so a template that fits renders byte-identically. The time
// limit is the backstop for steps of uneven cost; the step limit is what makes a failure the same on every machine.
//
// Failures are named by whose fault they are: ChatTemplateRefusal is the template's own raise_exception (it
// declined these messages: the request's fault), ChatTemplateBudgetError a crossed limit and ChatTemplateError any
// other failure inside the template (the model's fault).
import * as jinja from '@huggingface/jinja';

// The library's runtime classes, typed here: its index.d.ts re-exports them from './runtime', a path NodeNext
// resolution does not follow, so TypeScript would see them as untyped.
interface RuntimeValue {
  value: unknown;
}
interface Environment {
  set(name: string, value: unknown): unknown;
}
interface JinjaInterpreter {
  run(program: jinja.Template['parsed']): RuntimeValue;
  evaluate(statement: unknown, environment: Environment): RuntimeValue;
}
const Environment = jinja.Environment as new (parent?: Environment) => Environment;
const Interpreter = jinja.Interpreter as { new (environment?: Environment): JinjaInterpreter; prototype: JinjaInterpreter };

export interface ChatTemplateBudget {
  maxSteps: number;
  maxMillis: number;
  maxOutputChars: number;
  maxListItems: number;
}

/**
 * Generous for real templates, whose work grows with their messages (a Qwen3 chat takes some tens of steps per
 * message); the server's event loop waits at most about maxMillis for a template that loops.
 */
export const DEFAULT_CHAT_TEMPLATE_BUDGET: Readonly<ChatTemplateBudget> = Object.freeze({
  maxSteps: 5_000_000,
  maxMillis: 2_000,
  maxOutputChars: 64 * 1024 * 1024,
  maxListItems: 1_000_000,
});

/** The chat template failed while rendering (a fault of the model's template, not of the messages). */
export class ChatTemplateError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ChatTemplateError';
  }
}

/** The chat template crossed one of its render limits. */
export class ChatTemplateBudgetError extends ChatTemplateError {
  readonly limit: keyof ChatTemplateBudget;
  constructor(limit: keyof ChatTemplateBudget, message: string) {
    super(message);
    this.name = 'ChatTemplateBudgetError';
    this.limit = limit;
  }
}

/** The chat template called raise_exception: it declines these messages (the caller's input, not the template). */
export class ChatTemplateRefusal extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ChatTemplateRefusal';
  }
}

const TIME_CHECK_EVERY = 256;

/** The running count of one render. */
class RenderMeter {
  readonly #budget: ChatTemplateBudget;
  readonly #start = performance.now();
  #steps = 0;

  constructor(budget: ChatTemplateBudget) {
    this.#budget = budget;
  }

  step(): void {
    this.#steps += 1;
    if (this.#steps > this.#budget.maxSteps) {
      throw new ChatTemplateBudgetError('maxSteps', `the chat template ran past its budget of ${this.#budget.maxSteps} steps`);
    }
    if (this.#steps % TIME_CHECK_EVERY === 0) {
      const elapsed = performance.now() - this.#start;
      if (elapsed > this.#budget.maxMillis) {
        throw new ChatTemplateBudgetError(
          'maxMillis',
          `the chat template ran past its budget of ${this.#budget.maxMillis} ms (${this.#steps} steps)`,
        );
      }
    }
  }

  /** A value a step produced: a string or a list over the output limits stops the render. */
  produced(value: unknown): void {
    if (typeof value === 'string') this.#checkChars(value.length);
    else if (Array.isArray(value)) this.listItems(value.length);
  }

  listItems(count: number): void {
    if (count > this.#budget.maxListItems) {
      throw new ChatTemplateBudgetError(
        'maxListItems',
        `the chat template built a list of ${count} items, over its budget of ${this.#budget.maxListItems}`,
      );
    }
  }

  #checkChars(length: number): void {
    if (length > this.#budget.maxOutputChars) {
      throw new ChatTemplateBudgetError(
        'maxOutputChars',
        `the chat template produced ${length} characters, over its budget of ${this.#budget.maxOutputChars}`,
      );
    }
  }
}

type EvaluateBlock = (statements: unknown, environment: Environment) => RuntimeValue;

/**
 * The interpreter with its work charged to a meter: every statement and expression node goes through evaluate, and
 * every block (a loop's body once per iteration, even an empty one) through evaluateBlock, which the library's types
 * mark private, so it is wrapped on the instance.
 */
class MeteredInterpreter extends Interpreter {
  readonly #meter: RenderMeter;

  constructor(environment: Environment, meter: RenderMeter) {
    super(environment);
    this.#meter = meter;
    const self = this as unknown as { evaluateBlock: EvaluateBlock };
    const evaluateBlock = self.evaluateBlock;
    self.evaluateBlock = (statements, scope) => {
      meter.step();
      return evaluateBlock.call(this, statements, scope);
    };
  }

  override evaluate(statement: unknown, environment: Environment): RuntimeValue {
    this.#meter.step();
    const result = super.evaluate(statement, environment);
    this.#meter.produced(result.value);
    return result;
  }
}

/**
 * The environment Template.render starts from (true/false/none, range, raise_exception, strftime_now), which the
 * library builds inside render and does not export: taken once from the first evaluation of an empty template.
 * Renders read it as their parent scope and never write to it ({% set %} writes to the render's own scope).
 */
const libraryGlobals: Environment = (() => {
  const evaluate = Interpreter.prototype.evaluate;
  let captured: Environment | undefined;
  Interpreter.prototype.evaluate = function capture(this: JinjaInterpreter, statement, environment) {
    captured ??= environment;
    return evaluate.call(this, statement, environment);
  };
  try {
    new jinja.Template('').render();
  } finally {
    Interpreter.prototype.evaluate = evaluate;
  }
  if (captured === undefined) throw new Error('@huggingface/jinja: Template.render evaluated nothing');
  return captured;
})();

/** Jinja's range(stop) / range(start, stop[, step]) as the library computes it, its length checked before it is built. */
function meteredRange(meter: RenderMeter) {
  return (start: number, stop?: number, step = 1): number[] => {
    const [from, to] = stop === undefined ? [0, start] : [start, stop];
    if (step === 0) throw new Error('range() step must not be zero');
    // length = max(0, ⌈(to - from) / step⌉)
    meter.listItems(Math.max(0, Math.ceil((to - from) / step)));
    const result: number[] = [];
    if (step > 0) for (let i = from; i < to; i += step) result.push(i);
    else for (let i = from; i > to; i += step) result.push(i);
    return result;
  };
}

function raiseException(message: unknown): never {
  throw new ChatTemplateRefusal(String(message));
}

/** `template.render(variables)` within `budget`; failures are the classes above. */
export function renderChatTemplate(
  template: jinja.Template,
  variables: Record<string, unknown>,
  budget: ChatTemplateBudget = DEFAULT_CHAT_TEMPLATE_BUDGET,
): string {
  const meter = new RenderMeter(budget);
  try {
    // as Template.render, but the library's globals one scope up and range/raise_exception replaced in this one
    const environment = new Environment(libraryGlobals);
    environment.set('range', meteredRange(meter));
    environment.set('raise_exception', raiseException);
    for (const [name, value] of Object.entries(variables)) environment.set(name, value);
    return new MeteredInterpreter(environment, meter).run(template.parsed).value as string;
  } catch (error) {
    if (error instanceof ChatTemplateError || error instanceof ChatTemplateRefusal) throw error;
    // V8's own limits (string length, call stack depth) are the template's work too
    throw new ChatTemplateError(`the chat template failed: ${(error as Error).message}`);
  }
}
