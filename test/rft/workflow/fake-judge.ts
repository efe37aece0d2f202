// An auxiliary judge for workflow tests: its OpenAI client's chat.completions.create answers answer(call, index) and
// records every call (model, messages, sampling fields), so a test can check what the judge was asked.
import type { OpenAI } from 'openai';
import type { AuxiliaryModel, AuxiliaryModels } from '../../../src/rft/auxiliary/types.js';

export interface JudgeCall {
  model: string;
  messages: { role: string; content: string }[];
  temperature?: number;
  max_tokens?: number;
}

/** The judge `judge` (model name `judge-model`) as the only auxiliary model; `calls` fills as it is asked. */
export function fakeJudge(answer: (call: JudgeCall, index: number) => string): {
  models: AuxiliaryModels;
  calls: JudgeCall[];
} {
  const calls: JudgeCall[] = [];
  const client = {
    chat: {
      completions: {
        create: async (call: JudgeCall) => {
          calls.push(call);
          return { choices: [{ message: { role: 'assistant', content: answer(call, calls.length - 1) } }] };
        },
      },
    },
  } as unknown as OpenAI;
  const judge: AuxiliaryModel = {
    name: 'judge',
    modelName: 'judge-model',
    tokenizer: null,
    openai: async () => client,
    baseUrl: async () => 'http://unused/v1',
    logprobs: async () => [],
  };
  return { models: { list: [judge], get: () => judge }, calls };
}

/** A call's messages as one text, a `role: content` line each (what a test matches the prompt against). */
export const judgePrompt = (call: JudgeCall): string => call.messages.map((m) => `${m.role}: ${m.content}`).join('\n');
