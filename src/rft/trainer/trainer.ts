// The trainer as the run loop sees it: a client for the trainer worker thread (./trainer-worker-main.ts), which
// holds the policy, optimizer, reference, critic and train step. Experiences go in as plain data; weights come out
// by reference for the synchronizer.
//
// Data parallelism (init.distributed): one trainer per rank, each loading the same model or checkpoint. The run loop
// drives rank 0 as it drives a single trainer: step() sends the step's experiences to the other ranks, then every
// rank takes the same step (./train-step.ts runDistributed); close() sends them stop, or — when rank 0's stage failed
// — its error, so they fail at once too. The other ranks call follow(), which runs the steps rank 0 sends until it
// sends stop. Rank 0 alone writes checkpoints and weights, the same files as one process writes, so a run resumes on
// any number of ranks — but for a fully sharded policy's checkpoint, whose shards every rank writes (./fsdp-checkpoint.ts),
// which a run on any number of ranks resumes from too.
import type { ModelDType } from '../../model/index.js';
import { DistributedError, type Tensor, TensorWorker } from '../../torch/index.js';
import type { Experience } from '../experience.js';
import { RankZeroFailedError } from './data-parallel.js';

export { RankZeroFailedError } from './data-parallel.js';

export interface TrainerInit {
  jobDir: string;
  /** Start from the latest checkpoint in jobDir when there is one. */
  resume: boolean;
  modelPath: string;
  /** The policy's forward/backward dtype (and the reference's). */
  dtype: ModelDType;
  /**
   * The dtype of the weights the optimizer updates (default: dtype). bfloat16 dtype with float32 here: mixed precision
   * (./master-weights.ts); full fine-tuning only. Checkpoints hold the master weights, the explorer gets dtype's.
   */
  masterDtype?: ModelDType;
  /** Where the policy, its optimizer state, the reference and the critic live: 'cpu' (default) or 'cuda:N'. */
  device?: string;
  /** Trinity's algorithm section (resolved in the worker). */
  algorithm: Record<string, unknown>;
  /** Folder that module-path algorithm modules resolve against. */
  pluginBaseDir: string;
  /**
   * LoRA training (null: full fine-tuning). dropout is PEFT's lora_dropout: in the policy update's forward only, its
   * masks drawn from a stream seeded with `seed` and saved with checkpoints. rank, alpha, targetModules null: the
   * adapter folder's (loraPath, or the checkpoint's when resuming); a new adapter needs them set.
   */
  lora: {
    rank: number | null;
    alpha: number | null;
    dropout: number;
    targetModules: string[] | 'all-linear' | null;
  } | null;
  /**
   * Start from this PEFT adapter folder instead of a fresh adapter (Trinity-RFT model.lora_configs[0].path; needs
   * lora). Its adapter_config.json must have lora's rank, alpha and target modules where they are set (a difference
   * is an error naming both); lora.dropout applies. A resumed run loads its checkpoint's adapter instead (checked the
   * same way).
   */
  loraPath: string | null;
  /** The critic's initial trunk weights from this model folder (Trinity-RFT model.critic_model_path); null: the policy's. */
  criticModelPath: string | null;
  totalSteps: number;
  microBatchSize: number | null;
  /** Micro-batches by this token budget instead of microBatchSize rows (trainer.use_dynamic_bsz); null or absent: rows. */
  microBatchTokens?: number | null;
  gradientCheckpointing: boolean;
  /** trainer.bitwise_on_policy: the policy runs the batch-invariant forward (../../model/batch-invariant.ts). */
  bitwiseOnPolicy?: boolean;
  /** trainer.use_remove_padding (TrainStepSetup.removePadding; null: when it saves a fifth); absent: padded. */
  removePadding?: boolean | null;
  padTokenId: number;
  criticLr?: number;
  seed: number;
  numThreads?: number;
  /**
   * Data-parallel training on `worldSize` ranks (null or absent: this process alone). The worker joins a Gloo process
   * group (CPU tensors) at init: rank 0 serves its store at masterAddr:masterPort. `timeoutMs` bounds the rendezvous
   * and every collective; a follower's wait for rank 0's next command is bounded by `commandTimeoutMs` (default
   * timeoutMs), which must cover rank 0's longest time between two steps (exploration, evaluation, checkpoints).
   */
  distributed?: DistributedInit | null;
}

/** TrainerClient.shardedStateBytes: one rank's share of a fully sharded policy, in bytes. */
export interface ShardedStateBytes {
  /** This rank's parameter shards. */
  parameters: number;
  /** Their gradients now, and the most at once since the last call (between the reductions and the step). */
  gradients: number;
  peakGradients: number;
  /** This rank's AdamW state. */
  optimizer: number;
  /** The most bytes of gathered units held at once since the last call. */
  peakGathered: number;
  /** The whole policy's parameters (master dtype): what one process holds. */
  wholeParameters: number;
  units: number;
  /** Flat classes (a unit's weight-decay classes): each pads to a multiple of the world size. */
  classes: number;
  /** The gathered bytes of the root and of the largest layer. */
  largestGather: { root: number; layer: number };
}

export interface DistributedInit {
  rank: number;
  worldSize: number;
  masterAddr: string;
  masterPort: number;
  timeoutMs: number;
  commandTimeoutMs?: number;
  /**
   * The stage's name for the rendezvous (default 'trainer'): the same on every rank, different for consecutive
   * stages, so that a rank joins only the store of its own stage (./data-parallel.ts joinStageGroup).
   */
  stage?: string;
  /** Gradient bucket size in bytes (default PyTorch DDP's 25 MiB); buckets are summed while the backward runs. */
  bucketBytes?: number;
  /**
   * 1: ZeRO-1, the policy's AdamW state sharded over the ranks (./zero.ts); 0 or absent: every rank holds all of it
   * (trainer.zero_stage).
   */
  zeroStage?: 0 | 1;
  /**
   * 'fsdp': the policy's parameters, gradients and AdamW state sharded over the ranks, each layer gathered while it
   * runs (./fsdp.ts; trainer.trainer_strategy fsdp/fsdp2). Absent or 'ddp': every rank holds the whole policy.
   */
  strategy?: 'ddp' | 'fsdp';
  /** fsdp: issue the next layer's gather before this layer computes (default true; bench/fsdp.bench.ts measures it). */
  prefetch?: boolean;
}

/**
 * A worker result that may be a failed collective or rank 0's failure (DistributedError and RankZeroFailedError cross
 * the thread as plain data).
 */
export type DistributedOutcome<T> =
  | { ok: true; value: T }
  | {
      ok: false;
      error: { message: string; collective: string; rank: number; worldSize: number; timedOut: boolean };
    }
  | { ok: false; rankZeroFailed: { rank: number; worldSize: number; message: string } };

function unwrap<T>(outcome: DistributedOutcome<T>): T {
  if (outcome.ok) return outcome.value;
  if ('rankZeroFailed' in outcome) {
    const f = outcome.rankZeroFailed;
    throw new RankZeroFailedError(f.rank, f.worldSize, f.message);
  }
  const e = outcome.error;
  throw new DistributedError(e.message, e.collective, e.rank, e.worldSize, e.timedOut);
}

/** setTimeout's longest delay: follow() lasts the whole run; its real bounds are the collectives' timeouts. */
const FOLLOW_CALL_TIMEOUT_MS = 2_147_483_647;

export interface TrainerStart {
  /** The step the trainer resumes from (0: a fresh start). */
  step: number;
  /** The component state saved with that checkpoint. */
  state: Record<string, unknown> | null;
  algorithmType: string;
  /**
   * Bytes this rank read of a sharded checkpoint's files, or (a sharded policy) of a one-process checkpoint's
   * optimizer file, to resume: headers and the tensor ranges it needs (./fsdp-resume.ts); 0 otherwise.
   */
  checkpointBytesRead: number;
  /**
   * Bytes a sharded policy's rank read of its model folder at start (the base model, or a one-process checkpoint's
   * model/): headers and its shards' ranges (./fsdp-load.ts); 0 otherwise (the folder is loaded whole).
   */
  modelBytesRead: number;
}

export class TrainerClient {
  readonly #worker: TensorWorker;
  private constructor(worker: TensorWorker) {
    this.#worker = worker;
  }

  static async start(init: TrainerInit): Promise<{ trainer: TrainerClient; start: TrainerStart }> {
    const worker = await TensorWorker.start(new URL('./trainer-worker-main.ts', import.meta.url), {
      ...(init.numThreads ? { numThreads: init.numThreads } : {}),
    });
    try {
      const start = await worker.call<TrainerStart>('init', [init], { timeoutMs: 600_000 });
      return { trainer: new TrainerClient(worker), start };
    } catch (error) {
      await worker.terminate();
      throw error;
    }
  }

  /**
   * One training step; returns its metrics. On rank 0 of several, the other ranks (in follow()) take it too; a failed
   * collective rejects with a DistributedError naming it and the rank.
   */
  async step(experiences: readonly Experience[], timeoutMs = 3_600_000): Promise<Record<string, number>> {
    return unwrap(await this.#worker.call<DistributedOutcome<Record<string, number>>>('step', [experiences], { timeoutMs }));
  }

  /**
   * The last step's advantage per experience id: the mean over its response tokens of the advantage it trained with
   * (./train-step.ts lastAdvantages); what the run records beside the rollouts (./advantage-record.ts).
   */
  async lastAdvantages(timeoutMs = 60_000): Promise<Map<string, number>> {
    return new Map(await this.#worker.call<[string, number][]>('lastAdvantages', [], { timeoutMs }));
  }

  /**
   * Ranks > 0 of a data-parallel trainer: takes every step rank 0 sends, until rank 0's close() sends stop; resolves
   * with the number of steps taken. Rejects with a RankZeroFailedError carrying rank 0's error message when rank 0
   * closed after its stage failed; with a DistributedError naming the collective and this rank when one fails (rank 0
   * died, failed inside a step, or did not send within the timeouts); or with the step's error. Then close() this
   * trainer.
   */
  async follow(timeoutMs = FOLLOW_CALL_TIMEOUT_MS): Promise<{ steps: number }> {
    return unwrap(await this.#worker.call<DistributedOutcome<{ steps: number }>>('follow', [], { timeoutMs }));
  }

  /** The weights to copy (by reference); call endSync() once they are copied. Rank 0 only. */
  async beginSync(timeoutMs = 600_000): Promise<Map<string, Tensor>> {
    const weights = await this.#worker.call<Record<string, Tensor>>('beginSync', [], { timeoutMs });
    return new Map(Object.entries(weights));
  }

  endSync(timeoutMs = 600_000): Promise<void> {
    return this.#worker.call('endSync', [], { timeoutMs });
  }

  /**
   * Elements of the policy's optimizer state this process holds (`local`: its shard only under ZeRO-1) and of the
   * parameters that optimizer updates (`parameters`).
   */
  optimizerStateElements(timeoutMs = 60_000): Promise<{ local: number; parameters: number }> {
    return this.#worker.call('optimizerStateElements', [], { timeoutMs });
  }

  /**
   * A fully sharded policy's resident state on this rank, in bytes (./fsdp.ts): its parameter shards, their gradients,
   * its AdamW state, the most bytes of gathered units held at once since the last call, and the whole policy's
   * parameter bytes (master dtype). Null when the policy is not sharded.
   */
  shardedStateBytes(timeoutMs = 60_000): Promise<ShardedStateBytes | null> {
    return this.#worker.call('shardedStateBytes', [], { timeoutMs });
  }

  /** Writes the current (merged) weights as a Hugging Face folder. Rank 0 only. */
  saveWeights(dir: string, timeoutMs = 600_000): Promise<void> {
    return this.#worker.call('saveWeights', [dir], { timeoutMs });
  }

  /** Writes the LoRA adapter alone, in PEFT's format (a LoRA trainer only). Rank 0 only. */
  saveAdapter(dir: string, timeoutMs = 600_000): Promise<void> {
    return this.#worker.call('saveAdapter', [dir], { timeoutMs });
  }

  /**
   * Saves checkpoint `step` (model or adapter, optimizer, critic and its optimizer, the trainer's own state, and the
   * given component state); returns its folder. Rank 0 only.
   */
  save(step: number, state: Record<string, unknown>, keep: number, timeoutMs = 600_000): Promise<string> {
    return this.#worker.call('save', [step, state, keep], { timeoutMs });
  }

  /**
   * Ends the trainer; on rank 0 of several, first tells the other ranks to stop following. `failure`: the error that
   * ended rank 0's stage; the other ranks' follow() then rejects with a RankZeroFailedError carrying its message
   * instead of resolving (ignored on ranks > 0).
   */
  async close(options: { failure?: unknown } = {}): Promise<void> {
    const failure = 'failure' in options ? messageOf(options.failure) : null;
    try {
      await this.#worker.call('close', [failure], { timeoutMs: 60_000 });
    } finally {
      await this.#worker.terminate();
    }
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
