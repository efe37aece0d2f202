// Eval metrics over k sampled responses per task (Trinity-RFT's task-level eval metrics), each averaged over tasks.
// For one task with n responses, rewards r, and c correct responses:
//
//   mean@n   = mean(r)
//   pass@k   = 1 − C(n−c, k) / C(n, k)                     (unbiased; Chen et al. 2021, "Evaluating LLMs on Code")
//   best@k   = E[max of k responses drawn without replacement] = Σ_i r_(i) · C(i−1, k−1) / C(n, k)
//   worst@k  = E[min of k responses]                        = Σ_i r_(i) · C(n−i, k−1) / C(n, k)
//
// with r_(1) ≤ … ≤ r_(n) sorted ascending. Trinity-RFT estimates best@k/worst@k by bootstrap; these are the exact
// expectations the bootstrap approximates. k runs over 1, 2, 4, … < n and n.

/** C(n, k) as a float (exact for the small n here). */
export function binomial(n: number, k: number): number {
  if (k < 0 || k > n) return 0;
  let out = 1;
  for (let i = 1; i <= Math.min(k, n - k); i++) out = (out * (n - Math.min(k, n - k) + i)) / i;
  return out;
}

/** Unbiased pass@k of one task with n samples, c of them correct. */
export function passAtK(n: number, c: number, k: number): number {
  if (k > n) throw new RangeError(`pass@${k} needs at least ${k} samples, got ${n}`);
  if (n - c < k) return 1;
  // 1 − Π_{i=n−c+1}^{n} (1 − k/i): the numerically stable form of 1 − C(n−c, k)/C(n, k).
  let fail = 1;
  for (let i = n - c + 1; i <= n; i++) fail *= 1 - k / i;
  return 1 - fail;
}

/** Expected best of k of the rewards, drawn without replacement. */
export function bestAtK(rewards: readonly number[], k: number): number {
  const sorted = [...rewards].sort((a, b) => a - b);
  const n = sorted.length;
  if (k > n) throw new RangeError(`best@${k} needs at least ${k} samples, got ${n}`);
  return sorted.reduce((sum, r, i) => sum + (r * binomial(i, k - 1)) / binomial(n, k), 0);
}

/** Expected worst of k of the rewards, drawn without replacement. */
export function worstAtK(rewards: readonly number[], k: number): number {
  return -bestAtK(
    rewards.map((r) => -r),
    k,
  );
}

/** 1, 2, 4, … below n, then n. */
export function evalKs(n: number): number[] {
  const ks: number[] = [];
  for (let k = 1; k < n; k *= 2) ks.push(k);
  if (n > 0) ks.push(n);
  return ks;
}

/** One task's samples: rewards and which were correct. */
export interface TaskSamples {
  rewards: number[];
  correct: boolean[];
}

/**
 * mean@n, best@k, worst@k, pass@k averaged over tasks, for k in evalKs(n) with n = the largest sample count; a task
 * with fewer than k samples (failed runs) is left out of that k's average. Keys: `mean@4`, `pass@2`, …
 */
export function evalMetrics(tasks: readonly TaskSamples[]): Record<string, number> {
  const withSamples = tasks.filter((t) => t.rewards.length > 0);
  if (withSamples.length === 0) return {};
  const n = Math.max(...withSamples.map((t) => t.rewards.length));
  const average = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;
  const out: Record<string, number> = {};
  out[`mean@${n}`] = average(withSamples.map((t) => average(t.rewards)));
  for (const k of evalKs(n)) {
    const eligible = withSamples.filter((t) => t.rewards.length >= k);
    if (eligible.length === 0) continue;
    out[`best@${k}`] = average(eligible.map((t) => bestAtK(t.rewards, k)));
    out[`worst@${k}`] = average(eligible.map((t) => worstAtK(t.rewards, k)));
    out[`pass@${k}`] = average(eligible.map((t) => passAtK(t.rewards.length, t.correct.filter((c) => c).length, k)));
  }
  return out;
}
