// What auxiliary calls cost, as metrics: per model, the calls, their tokens (prompt + completion, from the answer's
// `usage` or the ids scored) and their wall seconds. Auxiliary calls are never experiences; the workflow runner keeps
// one AuxiliaryUsage per step and adds its metrics to the step's:
//   auxiliary/<name>/calls, auxiliary/<name>/failed, auxiliary/<name>/tokens, auxiliary/<name>/seconds

/** One finished call. */
export interface AuxiliaryCall {
  tokens: number;
  seconds: number;
  failed: boolean;
}

export class AuxiliaryUsage {
  readonly #byModel = new Map<string, { calls: number; failed: number; tokens: number; seconds: number }>();

  record(name: string, call: AuxiliaryCall): void {
    const entry = this.#byModel.get(name) ?? { calls: 0, failed: 0, tokens: 0, seconds: 0 };
    entry.calls++;
    if (call.failed) entry.failed++;
    entry.tokens += call.tokens;
    entry.seconds += call.seconds;
    this.#byModel.set(name, entry);
  }

  /** auxiliary/<name>/{calls,failed,tokens,seconds} of the models called so far. */
  metrics(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [name, e] of this.#byModel) {
      out[`auxiliary/${name}/calls`] = e.calls;
      out[`auxiliary/${name}/failed`] = e.failed;
      out[`auxiliary/${name}/tokens`] = e.tokens;
      out[`auxiliary/${name}/seconds`] = e.seconds;
    }
    return out;
  }
}

/**
 * A fetch for an `openai` client that records each call into `record` (tokens from a JSON answer's usage; a streamed
 * answer counts its call and the seconds to its headers) and is aborted with `signal` (the attempt's).
 */
export function meteredFetch(record: (call: AuxiliaryCall) => void, signal: AbortSignal | undefined): typeof fetch {
  return async (input, init) => {
    const started = performance.now();
    const signals = [init?.signal, signal].filter((s): s is AbortSignal => s != null);
    try {
      const res = await fetch(input, { ...init, ...(signals.length > 0 ? { signal: AbortSignal.any(signals) } : {}) });
      let tokens = 0;
      if (res.ok && (res.headers.get('content-type') ?? '').includes('application/json')) {
        try {
          const body = (await res.clone().json()) as { usage?: { total_tokens?: unknown } };
          if (typeof body.usage?.total_tokens === 'number') tokens = body.usage.total_tokens;
        } catch {
          // the client reports a malformed answer itself
        }
      }
      record({ tokens, seconds: (performance.now() - started) / 1000, failed: !res.ok });
      return res;
    } catch (error) {
      record({ tokens: 0, seconds: (performance.now() - started) / 1000, failed: true });
      throw error;
    }
  };
}
