// An engine's counters as flat metrics (name → number), summed over the engines of a pool: what `trinity serve`'s
// GET /metrics answers (../serve) and what a run logs beside its rollout metrics. Cumulative counters end in _total;
// the others are the state now.
//
//   engine/requests, engine/running, engine/waiting        requests in the engine, sequences decoding, waiting
//   engine/prefill_tokens_total                            positions run through prefill forwards (past cached prefixes)
//   engine/prefill_chunks_total                            prompt chunks run (chunked prefill: a prompt over k steps counts k)
//   engine/preemptions_total                               sequences preempted when blocks ran out (recomputed later)
//   prefix_cache/hits_total, misses_total                  full prompt blocks found / not found in the prefix cache
//   prefix_cache/evictions_total, invalidations_total      cached blocks taken back; caches emptied by weight syncs
//   kv_cache/blocks_held, blocks_cached, blocks_free       the paged cache's blocks now (blocks_total: all of them)
//   kv_cache/decode_copy_positions                         positions per layer of the decode batch's copy now (CPU)
//   kv_cache/decode_copy_rebuilds_total                    times that copy was gathered from the blocks
import type { RolloutEngineStats } from './types.js';

export function engineMetrics(engines: readonly RolloutEngineStats[]): Record<string, number> {
  const sum = (value: (s: RolloutEngineStats) => number) => engines.reduce((total, s) => total + value(s), 0);
  const metrics: Record<string, number> = {
    'engine/requests': sum((s) => s.requests),
    'engine/running': sum((s) => s.running),
    'engine/waiting': sum((s) => s.waiting),
    'engine/prefill_tokens_total': sum((s) => s.prefillTokens),
    'engine/prefill_chunks_total': sum((s) => s.prefillChunks),
    'engine/preemptions_total': sum((s) => s.preemptions),
  };
  if (engines.some((s) => s.kvCache !== null)) {
    const kv = (value: (k: NonNullable<RolloutEngineStats['kvCache']>) => number) =>
      sum((s) => (s.kvCache ? value(s.kvCache) : 0));
    Object.assign(metrics, {
      'prefix_cache/hits_total': kv((k) => k.hits),
      'prefix_cache/misses_total': kv((k) => k.misses),
      'prefix_cache/evictions_total': kv((k) => k.evictions),
      'prefix_cache/invalidations_total': kv((k) => k.invalidations),
      'kv_cache/blocks_total': kv((k) => k.totalBlocks),
      'kv_cache/blocks_held': kv((k) => k.heldBlocks),
      'kv_cache/blocks_cached': kv((k) => k.cachedBlocks),
      'kv_cache/blocks_free': kv((k) => k.freeBlocks),
      'kv_cache/decode_copy_positions': kv((k) => k.decodeCopyPositions),
      'kv_cache/decode_copy_rebuilds_total': kv((k) => k.decodeCopyRebuilds),
    });
  }
  return metrics;
}

/**
 * What the cumulative counters (names ending in _total) of two readings of engineMetrics added in between, named
 * without the suffix (a run's step: prefix_cache/hits, engine/prefill_tokens ...), with
 *   prefix_cache/hit_rate = hits / (hits + misses)   when any full prompt block was looked up
 */
export function counterIncrease(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
  const increase: Record<string, number> = {};
  for (const [name, value] of Object.entries(after))
    if (name.endsWith('_total')) increase[name.slice(0, -'_total'.length)] = value - (before[name] ?? 0);
  const looked = (increase['prefix_cache/hits'] ?? 0) + (increase['prefix_cache/misses'] ?? 0);
  if (looked > 0) increase['prefix_cache/hit_rate'] = (increase['prefix_cache/hits'] as number) / looked;
  return increase;
}
