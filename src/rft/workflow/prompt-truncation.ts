// Rollout prompts longer than model.max_prompt_tokens, as Trinity-RFT treats them (model.enable_prompt_truncation,
// default true; its BaseInferenceModel._handle_prompt_truncation): nothing is generated from such a prompt. Each of
// the n samples asked for becomes a placeholder that the trainer learns nothing from:
//
//   tokens         = ids[0 : max_prompt_tokens + 1]    the prompt's head (its first tokens are kept), the last one
//   promptLength   = max_prompt_tokens                 standing in as a one-token response
//   logprobs = [0], actionMask = [0]                   masked out of every loss
//   truncateStatus = 'prompt_truncated',  responseText = PROMPT_TRUNCATED_TEXT
//
// The workflow goes on as with any answer (a single-turn workflow scores the placeholder text with its reward
// function, as Trinity's SimpleWorkflow does), so the task keeps its n runs; rollout/prompt_truncated_ratio counts
// them (./step-metrics.ts). The rule applies to a call's own prompt: generate(), and chat() when it starts a
// conversation. A chat() call that continues a recorded conversation (../../engine/conversation.ts) is bounded by
// max_model_len instead, as Trinity's multi-turn experiences are: the engine refuses a continuation that leaves no
// room, naming the lengths, and the environment and tool-agent workflows end the episode there (context_full). So is
// a chat() with image parts (a vision-language model): its length is known only once the images are decoded.
// Calls through the OpenAI endpoint (model.openai()) are not truncated, as in Trinity: a prompt over max_model_len
// is the endpoint's 400 for the agent, and the turns recorded before it stay. With truncation off, a prompt is left
// as it is: the engine generates from it while it leaves room in max_model_len and refuses it, naming the lengths,
// when it does not.
//
// A bound before tokenizing (encodePromptHead): a prompt is never needed past max_prompt_tokens + 1 tokens (with
// truncation off, past max_model_len), so a huge text is tokenized in head slices of growing length instead of whole:
//
//   chars_0 = 4 · (keep + HEAD_MARGIN),  chars_{i+1} = 2 · chars_i;  stop at the first slice that yields at least
//   keep + HEAD_MARGIN ids (return its first keep + HEAD_MARGIN), or once the slice is the whole text.
//
// A token covers at most L characters of text (L: the tokenizer's longest token), so a slice that yields too few ids
// is shorter than L · (keep + HEAD_MARGIN) characters: the slices stop by chars ≤ max(4, 2L) · (keep + HEAD_MARGIN),
// and all of them together hold under twice that many characters. Tokenizers split text into pieces (words,
// whitespace runs, special tokens) and encode each piece alone, so cutting the text can change only the ids of the
// piece the cut falls in; with HEAD_MARGIN ids between the kept ids and the cut, the kept ids are the whole text's.
// (A piece longer than HEAD_MARGIN ids, e.g. a run of letters with no space or punctuation, is the one case whose
// merges near the cut could in principle reach back further.)
import type { Completion, GenerateResult } from '../../engine/index.js';
import type { Tokenizer } from '../../tokenizer/index.js';

/** What a rollout does with a long prompt: the stage's model.max_prompt_tokens, max_model_len, enable_prompt_truncation. */
export interface PromptLimit {
  maxPromptTokens: number;
  maxModelLen: number;
  /** model.enable_prompt_truncation. */
  truncate: boolean;
}

/** The response text of a placeholder experience (Trinity's words). */
export const PROMPT_TRUNCATED_TEXT = '[This experience is masked out due to overlong prompt]';

/** Ids past those a caller keeps that a head slice must also yield, so the cut cannot touch the kept ones. */
export const HEAD_MARGIN = 64;

/** The first ids of `text`: all of them (`whole`), or at least `keep` of the whole text's first ids, tokenized from a bounded head. */
export function encodePromptHead(
  tokenizer: Pick<Tokenizer, 'encode'>,
  text: string,
  keep: number,
): { ids: number[]; whole: boolean } {
  const enough = keep + HEAD_MARGIN;
  for (let chars = 4 * enough; ; chars *= 2) {
    if (chars >= text.length) return { ids: tokenizer.encode(text), whole: true };
    // never split a surrogate pair: a lone half would encode as a replacement character
    const end = isHighSurrogate(text.charCodeAt(chars - 1)) ? chars - 1 : chars;
    const ids = tokenizer.encode(text.slice(0, end));
    if (ids.length >= enough) return { ids: ids.slice(0, enough), whole: false };
  }
}

function isHighSurrogate(code: number): boolean {
  return code >= 0xd800 && code <= 0xdbff;
}

/** Whether a prompt of these ids (a head from encodePromptHead, or all of them) is over the limit. */
export function overPromptLimit(promptIds: readonly number[], limit: PromptLimit): boolean {
  return promptIds.length > limit.maxPromptTokens;
}

/**
 * The prompt ids a rollout generates from, tokenizing at most a bounded head of `text`: all of them when the
 * prompt fits (or is left to the engine: truncation off and not over max_model_len), else a head over the limit
 * (placeholderResult makes the samples of it). Truncation off, a prompt over max_model_len is an error naming both.
 */
export function limitedPromptIds(tokenizer: Pick<Tokenizer, 'encode'>, text: string, limit: PromptLimit): number[] {
  const keep = (limit.truncate ? limit.maxPromptTokens : limit.maxModelLen) + 1;
  const head = encodePromptHead(tokenizer, text, keep);
  if (!limit.truncate && !head.whole) {
    throw new RangeError(
      `generate: the prompt has more than ${limit.maxModelLen} tokens: no room for a completion in model.max_model_len ` +
        `(${limit.maxModelLen}); model.enable_prompt_truncation is false, so it is not truncated`,
    );
  }
  return head.ids;
}

/**
 * The result of a prompt over the limit: n placeholder samples (see the header), nothing generated. promptIds holds
 * at least max_prompt_tokens + 1 ids (the prompt's head).
 */
export function placeholderResult(promptIds: readonly number[], limit: PromptLimit, n: number): GenerateResult {
  const kept = promptIds.slice(0, limit.maxPromptTokens);
  const stand = promptIds[limit.maxPromptTokens] as number;
  const completions: Completion[] = Array.from({ length: n }, (_, index) => ({
    index,
    tokenIds: [stand],
    logprobs: [0],
    text: PROMPT_TRUNCATED_TEXT,
    finishReason: 'length',
    stopReason: null,
  }));
  return { promptIds: kept, completions };
}
