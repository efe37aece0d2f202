// The experts a mixture-of-experts policy routed a rollout's tokens to (router replay, algorithm.enable_router_replay),
// as an Experience carries them through the buffers: compact and plain JSON.
//
//   layers   the model's sparse layer indices recorded, in order                    length L
//   k        experts per token per layer (num_experts_per_tok)
//   tokens   how many of the experience's first tokens are recorded: the engine records every token it fed through
//            the model (the prompt, then each generated token but the last), so tokens = tokens.length - 1
//   ids      base64 of little-endian int16 expert ids, row-major [tokens × L × k]
//
// An int16 per id keeps a record at 2·L·k bytes a token (qwen3_moe 30B: 48 layers × top-8 → 768 bytes), 4/3 of that as
// base64; a JSON number list would be 2-4 times larger and slower to parse. The trainer turns a record into each
// layer's [tokens, k] ids (./trainer/router-replay.ts).
export interface RoutedExperts {
  layers: number[];
  k: number;
  tokens: number;
  ids: string;
}

/** The record of `ids` [tokens × layers.length × k] (each an expert index < 2^15). */
export function encodeRoutedExperts(ids: ArrayLike<number>, layers: readonly number[], k: number): RoutedExperts {
  const perToken = layers.length * k;
  if (perToken === 0 || ids.length % perToken !== 0)
    throw new RangeError(`routed experts: ${ids.length} ids are not whole tokens of ${layers.length} layers × top-${k}`);
  const bytes = Buffer.alloc(ids.length * 2);
  for (let i = 0; i < ids.length; i++) bytes.writeInt16LE(ids[i] as number, i * 2);
  return { layers: [...layers], k, tokens: ids.length / perToken, ids: bytes.toString('base64') };
}

/** The ids of a record, [tokens × layers × k] row-major (checked with routedExpertsProblem first). */
export function decodeRoutedExperts(record: RoutedExperts): Int16Array {
  const bytes = Buffer.from(record.ids, 'base64');
  const out = new Int16Array(bytes.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = bytes.readInt16LE(i * 2);
  return out;
}

/** What is wrong with an experience's routedExperts (null: nothing, or none), naming the field; `length`: its tokens. */
export function routedExpertsProblem(given: unknown, length: number): string | null {
  if (given === undefined) return null;
  const record = given as Partial<RoutedExperts> | null;
  if (record === null || typeof record !== 'object') return 'routedExperts must be an object {layers, k, tokens, ids}';
  const { layers, k, tokens, ids } = record;
  if (!Array.isArray(layers) || layers.length === 0 || !layers.every((l) => Number.isInteger(l) && l >= 0))
    return 'routedExperts.layers must be a non-empty list of layer indices';
  if (typeof k !== 'number' || !Number.isInteger(k) || k < 1)
    return `routedExperts.k must be a positive integer, got ${String(k)}`;
  if (typeof tokens !== 'number' || !Number.isInteger(tokens) || tokens < 0 || tokens > length)
    return `routedExperts.tokens must be an integer in [0, ${length}] (the experience's tokens), got ${String(tokens)}`;
  if (typeof ids !== 'string') return 'routedExperts.ids must be a base64 string';
  const expected = tokens * layers.length * k * 2;
  const bytes = Buffer.from(ids, 'base64').length;
  if (bytes !== expected)
    return `routedExperts.ids holds ${bytes} bytes; ${tokens} tokens × ${layers.length} layers × top-${k} need ${expected}`;
  return null;
}
