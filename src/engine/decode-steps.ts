// Captured decode steps of a RolloutEngine: the model's forward for one token per running row, recorded once per
// shape (../torch/capture.ts) and replayed in one native call, instead of ~10 native calls per layer from JavaScript.
//
// A step's shape is its KV-cache plan's shapeKey (../model/kv-cache.ts): batch rows, the key length rounded up to
// the engine's decodeKeyBucket positions, how the rows read the cache. Per-step values (the tokens, slots, cache
// positions, RoPE offsets) are the captured step's inputs. A shape seen for the first time runs eagerly; the second
// time it runs eagerly while it is captured (recording costs about a step, so shapes that never come back are not
// recorded); from then on it is replayed. A step that cannot be replayed (a dynamic-RoPE model reads a value back)
// runs eagerly, and after two such captures its shape stays eager. Weights and caches are used by reference: weight
// syncs write them in place and repack the packed copies in place (CausalLM.refreshPackedWeights), so captured
// steps stay valid across syncs.
//
// With cudaGraphs (an engine on a CUDA device), each captured step is also recorded as a CUDA graph at its first
// replay (../torch/capture.ts): later replays are one graph launch. A step whose graph cannot be recorded keeps
// replaying op by op (stats.graphFailures, lastGraphReason).
import * as torch from '../torch/index.js';

/** Captured steps kept at most (least recently replayed go first). */
const MAX_STEPS = 64;
/** Shapes remembered at most (seen once, captured, or unreplayable). */
const MAX_SHAPES = 1024;
/** Captures of one shape that came back unreplayable before the shape stays eager. */
const MAX_FAILED_CAPTURES = 2;

interface Entry {
  step: torch.CapturedStep | null;
  failures: number;
  /** Its CUDA graph is recorded at the next replay. */
  graphPending: boolean;
  /** It replays as a CUDA graph. */
  graph: boolean;
}

export interface DecodeStepStats {
  /** Steps run by a replay. */
  replays: number;
  /** Steps run eagerly while being captured. */
  captures: number;
  /** Steps run eagerly: a shape's first time, or a shape that cannot be replayed. */
  eager: number;
  /** Captured steps held now. */
  held: number;
  /** Why the last unreplayable capture was not replayable (null: none was). */
  lastReason: string | null;
  /** Captured steps held now that replay as CUDA graphs (cudaGraphs). */
  graphs: number;
  /** Captured steps whose CUDA graph was refused or failed to record; they replay op by op. */
  graphFailures: number;
  /** Why the last of those has no graph (null: none). */
  lastGraphReason: string | null;
}

export interface DecodeStepsOptions {
  /** Record each captured step as a CUDA graph (its inputs on a CUDA device). Default false. */
  cudaGraphs?: boolean;
}

export class DecodeSteps {
  /** Shapes seen, least recently used first (a replay or capture moves its shape to the end). */
  readonly #entries = new Map<string, Entry>();
  readonly #stats: DecodeStepStats = {
    replays: 0,
    captures: 0,
    eager: 0,
    held: 0,
    lastReason: null,
    graphs: 0,
    graphFailures: 0,
    lastGraphReason: null,
  };
  readonly #cudaGraphs: boolean;

  constructor(options: DecodeStepsOptions = {}) {
    this.#cudaGraphs = options.cudaGraphs ?? false;
  }

  /** Runs the step of shape `key`: a replay over `inputs` if captured, else `forward` (capturing it when worth it). */
  run(key: string, inputs: readonly torch.Tensor[], forward: () => torch.Tensor[]): torch.Tensor[] {
    const entry = this.#entries.get(key);
    if (entry?.step) {
      this.#touch(key, entry);
      this.#stats.replays++;
      const outputs = entry.step.replay(inputs);
      if (entry.graphPending) this.#graphRecorded(entry, entry.step);
      return outputs;
    }
    if (entry === undefined || entry.failures >= MAX_FAILED_CAPTURES) {
      if (entry === undefined) this.#touch(key, { step: null, failures: 0, graphPending: false, graph: false });
      this.#stats.eager++;
      return forward();
    }
    const offCuda = this.#cudaGraphs ? inputs.findIndex((t) => !t.device.startsWith('cuda')) : -1;
    const cudaGraph = this.#cudaGraphs && offCuda < 0;
    const { outputs, step, reason } = torch.capture(inputs, forward, { cudaGraph });
    this.#stats.captures++;
    if (step === null) {
      this.#stats.lastReason = reason;
      entry.failures++;
    } else {
      entry.step = step;
      this.#stats.held++;
      if (cudaGraph) {
        const graph = step.graph;
        if (graph.state === 'pending') entry.graphPending = true;
        else this.#noGraph(graph.reason);
      } else if (this.#cudaGraphs) this.#noGraph(`input ${offCuda} of the step is on ${inputs[offCuda]?.device}, not CUDA`);
    }
    this.#touch(key, entry);
    return outputs;
  }

  /** Drops every captured step (on close). */
  invalidate(): void {
    for (const entry of this.#entries.values()) entry.step?.dispose();
    this.#entries.clear();
    this.#stats.held = 0;
    this.#stats.graphs = 0;
  }

  /** After the first replay of a step whose graph was pending: it is recorded now, or it failed. */
  #graphRecorded(entry: Entry, step: torch.CapturedStep): void {
    const graph = step.graph;
    entry.graphPending = false;
    if (graph.state === 'ready') {
      entry.graph = true;
      this.#stats.graphs++;
    } else this.#noGraph(graph.reason);
  }

  #noGraph(reason: string | null): void {
    this.#stats.graphFailures++;
    this.#stats.lastGraphReason = reason;
  }

  get stats(): DecodeStepStats {
    return { ...this.#stats };
  }

  /** Moves `key` to the end of the order, then drops the least recently used shapes beyond the limits. */
  #touch(key: string, entry: Entry): void {
    this.#entries.delete(key);
    this.#entries.set(key, entry);
    for (const [oldKey, old] of this.#entries) {
      if (this.#stats.held <= MAX_STEPS && this.#entries.size <= MAX_SHAPES) break;
      if (old.step === null && this.#entries.size <= MAX_SHAPES) continue;
      if (old.step !== null) {
        old.step.dispose();
        this.#stats.held--;
        if (old.graph) this.#stats.graphs--;
      }
      this.#entries.delete(oldKey);
    }
  }
}
