// A rollout backend that "generates" what a policy writes for the decoded prompt (exact ids, eos appended, maxTokens
// honoured, every log-prob -0.25; request.n samples, policy(prompt, i) the i-th): the whole OpenAI path (server,
// tool-call parsing, conversation tracking) runs as with a real model, with replies a test chooses.
import type { GenerateRequest, GenerateResult } from '../../../src/engine/index.js';
import type { RolloutBackend } from '../../../src/rft/workflow/index.js';
import type { Tokenizer } from '../../../src/tokenizer/index.js';

export const SCRIPTED_LOGPROB = -0.25;

export class ScriptedBackend implements RolloutBackend {
  readonly maxLength = 2048;
  prompts: string[] = [];
  constructor(
    readonly tokenizer: Tokenizer,
    readonly policy: (prompt: string, sample: number) => string,
  ) {}

  async generate(request: GenerateRequest): Promise<GenerateResult> {
    const promptIds = [...(request.promptIds ?? [])];
    const prompt = this.tokenizer.decode(promptIds, { skipSpecialTokens: false });
    this.prompts.push(prompt);
    const eos = this.tokenizer.eosTokenIds[0] as number;
    const completions = Array.from({ length: request.n ?? 1 }, (_, index) => {
      let tokenIds = [...this.tokenizer.encode(this.policy(prompt, index)), eos];
      let finishReason: 'stop' | 'length' = 'stop';
      if (request.maxTokens !== undefined && tokenIds.length > request.maxTokens) {
        tokenIds = tokenIds.slice(0, request.maxTokens);
        finishReason = 'length';
      }
      return {
        index,
        tokenIds,
        logprobs: tokenIds.map(() => SCRIPTED_LOGPROB),
        text: this.tokenizer.decode(tokenIds, { skipSpecialTokens: true }),
        finishReason,
        stopReason: finishReason === 'stop' ? eos : null,
      };
    });
    return { promptIds, completions };
  }

  async chat(): Promise<never> {
    throw new Error('the scripted backend only serves generate()');
  }
}
