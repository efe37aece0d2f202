// Trinity-RFT's agentscope_gomoku example (its GomokuWorkflow, GomokuAgent and GomokuEnv), ported: an AgentScope
// ReAct agent (v1, no tools, no structured answer, max_iters 2: ./react-agent.ts) plays X against the scripted
// opponent of ../env/gomoku.ts, one move per reply, the same agent (so the same memory) for the whole game.
//
//   observation = the empty board
//   repeat agent_max_steps (default 20):
//     prompt  = the board, "step n", the move format, a note when the last move left the board unchanged, the
//               steps remaining
//     move    = the last ```…``` block of the reply, read as ```row,col``` (anything else: an invalid move, (-1, -1))
//     reward_t, done = the board's step (+1 win, -1 loss, -1 each invalid move, 0 otherwise); stop when done
//   reward  = Σ reward_t, on every experience (one per model call: Trinity's history recording), with
//             info.terminate_reason = the board's last reason (agent_won, opponent_won, draw), max_steps_reached, or
//             agent_error (the conversation outgrew the model's context)
//   metrics = env_steps, env_done, final_reward, on the run's last experience (as upstream's)
//
// The example's config names the workflow by its Python class path (no short name upstream); its workflow_args are
// board_size (5), win_length (4) and agent_max_steps (20). The rollout args sent on each call are upstream's two:
// temperature and max_tokens. Prose is this backend's wording; the move format (```row,col```, zero-based) is
// upstream's, and the system prompt states the configured win length where upstream's always says 4. Other errors
// than a full context (a failed request) fail the run rather than ending it as agent_error.
import type OpenAI from 'openai';
import { mixSeed } from '../../buffer/random.js';
import { GomokuGame, type GomokuReason } from '../env/gomoku.js';
import type { WorkflowContext, WorkflowSpec } from '../types.js';
import { WORKFLOWS } from '../workflow-registry.js';
import { requestFields } from './openai-request.js';
import { runReActAgent } from './react-agent.js';

type MessageParam = OpenAI.Chat.Completions.ChatCompletionMessageParam;

export const GOMOKU_CLASS_PATH = 'examples.agentscope_gomoku.workflow.GomokuWorkflow';
const WHO = GOMOKU_CLASS_PATH;
/** The ReAct agent's iterations per reply (upstream's GomokuAgent sets 2). */
const GOMOKU_AGENT_MAX_ITERS = 2;

/** The agent's system prompt: the rules and the move format. */
export function gomokuSystemPrompt(winLength: number): string {
  return [
    'You are playing Gomoku on a square board.',
    '',
    'The board shows "." for an empty cell, "X" for your stones and "O" for your opponent\'s. You play X.',
    'Players take turns placing one stone on an empty cell. The first to line up',
    `${winLength} stones in a row (across, down or diagonally) wins.`,
    'Rows and columns are numbered from 0, as the board shows them.',
    '',
    'Reply with your move, row then column, inside triple backticks, for example:',
    '```2,3```',
    'Give exactly one move, and only on an empty cell.',
  ].join('\n');
}

/** The user message of one move (upstream's GomokuAgent.get_prompt, in our words). */
export function gomokuMovePrompt(options: {
  observation: string;
  step: number;
  lastObservation: string | null;
  maxSteps: number;
}): string {
  let prompt =
    `Current board (step ${options.step}):\n${options.observation}\n\n` +
    'You are X. Pick an empty cell for your next stone.\n' +
    'Answer with only its row and column inside triple backticks.\n' +
    'Example: ```2,3```';
  if (options.step > 0 && options.lastObservation === options.observation)
    prompt += '\nYour last move was invalid and the board did not change. Pick another, empty cell.';
  const remaining = options.maxSteps - options.step;
  if (remaining > 0) prompt += `\nSteps left: ${remaining}.`;
  return prompt;
}

/** The move in a reply: the last ```…``` block as `row,col`, else null (upstream's INVALID_ACTION). */
export function parseGomokuMove(reply: string): readonly [number, number] | null {
  const blocks = [...reply.matchAll(/```([\s\S]*?)```/g)];
  const last = blocks.at(-1)?.[1];
  if (last === undefined) return null;
  const match = /^\s*(\d+)\s*,\s*(\d+)\s*$/.exec(last.trim());
  if (match === null) return null;
  return [Number(match[1]), Number(match[2])];
}

interface GomokuArgs {
  boardSize: number;
  winLength: number;
  agentMaxSteps: number;
}

function positiveInteger(args: Readonly<Record<string, unknown>>, key: string, fallback: number): number {
  const value = args[key] ?? fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1)
    throw new Error(`${WHO}: workflow_args.${key} must be a positive integer, got ${JSON.stringify(value)}`);
  return value;
}

function gomokuArgs(args: Readonly<Record<string, unknown>>): GomokuArgs {
  const parsed = {
    boardSize: positiveInteger(args, 'board_size', 5),
    winLength: positiveInteger(args, 'win_length', 4),
    agentMaxSteps: positiveInteger(args, 'agent_max_steps', 20),
  };
  if (parsed.boardSize < parsed.winLength)
    throw new Error(
      `${WHO}: workflow_args.board_size (${parsed.boardSize}) must be at least workflow_args.win_length (${parsed.winLength})`,
    );
  return parsed;
}

type TerminateReason = GomokuReason | 'max_steps_reached' | 'agent_error';

async function playGomoku({ task, model, runIdBase, seed, signal }: WorkflowContext) {
  const args = gomokuArgs(task.workflowArgs ?? {});
  const game = new GomokuGame(args.boardSize, args.winLength);
  const client = await model.openai();
  const fields = requestFields(task, WHO);
  const request = {
    ...(fields.temperature !== undefined ? { temperature: fields.temperature } : {}),
    ...(fields.max_tokens !== undefined ? { max_tokens: fields.max_tokens } : {}),
  };
  const memory: MessageParam[] = [];
  let observation = game.reset();
  let lastObservation: string | null = null;
  let terminateReason: TerminateReason = 'max_steps_reached';
  let finalReward = 0;
  let steps = 0;
  for (let step = 0; step < args.agentMaxSteps && !game.done; step++) {
    steps++;
    const reply = await runReActAgent(client, {
      style: 'v1',
      systemPrompt: gomokuSystemPrompt(args.winLength),
      query: gomokuMovePrompt({ observation, step, lastObservation, maxSteps: args.agentMaxSteps }),
      tools: [],
      maxIters: GOMOKU_AGENT_MAX_ITERS,
      memory,
      request,
      seed: (call) => mixSeed(seed, step, call),
      signal,
    });
    if (reply.contextFull) {
      terminateReason = 'agent_error';
      break;
    }
    const move = parseGomokuMove(reply.text) ?? [-1, -1];
    lastObservation = observation;
    const outcome = game.step(move[0], move[1]);
    observation = outcome.observation;
    finalReward += outcome.reward;
    if (outcome.done) terminateReason = outcome.reason;
  }
  const experiences = model.recordedExperiences({
    scope: 'turn',
    reward: finalReward,
    runId: runIdBase,
    info: { terminate_reason: terminateReason },
  });
  const last = experiences.at(-1);
  if (last !== undefined) last.metrics = { env_steps: steps, env_done: game.done ? 1 : 0, final_reward: finalReward };
  return experiences;
}

export const gomokuWorkflow: WorkflowSpec = {
  repeatable: false,
  readsPrompt: false,
  workflowArgs: ['board_size', 'win_length', 'agent_max_steps'],
  checkArgs: (args) => {
    gomokuArgs(args);
  },
  description:
    'AgentScope ReAct agent plays Gomoku (X, moves as ```row,col```) against a first-empty-cell opponent; reward: +1 win, -1 loss, -1 per invalid move',
  run: playGomoku,
};

WORKFLOWS.register(GOMOKU_CLASS_PATH, gomokuWorkflow);
