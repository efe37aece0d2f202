// What the remote engine sends an OpenAI-compatible server and reads back, for /v1/completions (./remote-engine.ts)
// and /v1/chat/completions (./remote-images.ts) alike:
//
//   sampling fields   n, max_tokens (default 16), temperature (default 1), top_p, top_k, min_p, seed, stop,
//                     stop_token_ids, ignore_eos, skip_special_tokens (vLLM's names beyond OpenAI's), and
//                     return_token_ids (vLLM >= 0.10.2: prompt_token_ids and each choice's token_ids)
//   "token_id:<id>"   a log-prob entry's token under return_tokens_as_token_ids (vLLM, `trinity serve`): its exact id
//   top_logprobs      per position {"token_id:<id>": logprob} (completions) or [{token, logprob}] (chat); the k most
//                     likely are kept, most likely first (the sampled token may be an extra entry)
import { type GenerateRequest, GenerationError, type TopLogprob } from '../engine/index.js';

/** The sampling fields of a request's body (see the header). */
export function samplingFields(request: GenerateRequest): Record<string, unknown> {
  return {
    n: request.n ?? 1,
    max_tokens: request.maxTokens ?? 16,
    temperature: request.temperature ?? 1,
    ...(request.topP !== undefined ? { top_p: request.topP } : {}),
    ...(request.topK !== undefined && request.topK > 0 ? { top_k: request.topK } : {}),
    ...(request.minP !== undefined ? { min_p: request.minP } : {}),
    ...(request.seed !== undefined ? { seed: Number(request.seed) } : {}),
    ...(request.stop !== undefined ? { stop: request.stop } : {}),
    ...(request.stopTokenIds ? { stop_token_ids: request.stopTokenIds } : {}),
    ...(request.ignoreEos ? { ignore_eos: true } : {}),
    ...(request.skipSpecialTokens !== undefined ? { skip_special_tokens: request.skipSpecialTokens } : {}),
    return_token_ids: true,
  };
}

/** ["token_id:12", ...] → [12, ...]; null when the tokens are not in that form. */
export function tokensAsIds(tokens: readonly string[] | undefined): number[] | null {
  if (!tokens) return null;
  const ids: number[] = [];
  for (const token of tokens) {
    const match = /^token_id:(\d+)$/.exec(token);
    if (!match) return null;
    ids.push(Number(match[1]));
  }
  return ids;
}

/**
 * The `k` most likely of each position's top_logprobs ({"token_id:<id>": logprob}), for `length` positions; errors
 * name the server (`baseURL`) and the position.
 */
export function topLogprobsOf(
  baseURL: string,
  entries: ReadonlyArray<Readonly<Record<string, number>> | null> | undefined,
  length: number,
  k: number,
): TopLogprob[][] {
  const positions = entries ?? [];
  if (positions.length !== length)
    throw new GenerationError('failed', `${baseURL}: ${length} token ids but ${positions.length} top_logprobs`);
  return positions.map((entry, i) => {
    const top = Object.entries(entry ?? {}).map(([token, logprob]) => {
      const match = /^token_id:(\d+)$/.exec(token);
      if (!match) throw new GenerationError('failed', `${baseURL}: top_logprobs[${i}] has token '${token}', not 'token_id:<id>'`);
      return { tokenId: Number(match[1]), logprob };
    });
    if (top.length < k)
      throw new GenerationError('failed', `${baseURL}: top_logprobs[${i}] has ${top.length} entries, ${k} were asked for`);
    return top.sort((a, b) => b.logprob - a.logprob).slice(0, k);
  });
}
