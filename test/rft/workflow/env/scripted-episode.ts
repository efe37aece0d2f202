// Plays one episode of an environment workflow with replies a test chooses (the scripted backend behind the real
// chat path and conversation tracking), for the tests of the environments' experiences (state hashes, gigpo).
import { chat } from '../../../../src/engine/index.js';
import { NO_AUXILIARY_MODELS } from '../../../../src/rft/auxiliary/index.js';
import type { Experience } from '../../../../src/rft/experience.js';
import type { Task } from '../../../../src/rft/task.js';
import {
  attemptModelHandle,
  EngineModelHandle,
  type RolloutBackend,
  type WorkflowContext,
  type WorkflowSpec,
} from '../../../../src/rft/workflow/index.js';
import type { Tokenizer } from '../../../../src/tokenizer/index.js';
import { ScriptedBackend } from '../scripted-backend.js';

/** The scripted backend with chat(): each reply is `policy(last user turn)`. */
export function scriptedChat(tok: Tokenizer, policy: (observation: string) => string): RolloutBackend {
  const lastUserTurn = (prompt: string) => prompt.slice(prompt.lastIndexOf('<|im_start|>user\n') + 17).split('<|im_end|>')[0];
  const scripted = new ScriptedBackend(tok, (prompt) => policy(lastUserTurn(prompt) ?? ''));
  const backend: RolloutBackend = {
    tokenizer: tok,
    generate: (request) => scripted.generate(request),
    chat: (messages, options) => chat({ tokenizer: tok, generate: backend.generate }, messages, options),
  };
  return backend;
}

/** Plays one episode of `task` with `replies` in order (one per turn, then 'Up'); its experiences, run `runId`. */
export async function playScripted(
  tokenizer: Tokenizer,
  workflow: WorkflowSpec,
  task: Task,
  runId: number,
  replies: readonly string[],
): Promise<Experience[]> {
  let turn = 0;
  const backend = scriptedChat(tokenizer, () => replies[turn++] ?? 'Up');
  const signal = new AbortController().signal;
  const context: WorkflowContext = {
    task,
    model: attemptModelHandle(new EngineModelHandle(backend), { signal, taskId: task.id }),
    repeatTimes: 1,
    runIdBase: runId,
    seed: 5,
    signal,
    isEval: false,
    auxiliaryModels: NO_AUXILIARY_MODELS,
  };
  return workflow.run(context);
}
