// The trainer as the run loop sees it: a client for the trainer worker thread (./trainer-worker-main.ts), which
// holds the policy, optimizer, reference, critic and train step. Experiences go in as plain data; weights come out
// by reference for the synchronizer.
import type { ModelDType } from '../../model/index.js';
import { type Tensor, TensorWorker } from '../../torch/index.js';
import type { Experience } from '../experience.js';

export interface TrainerInit {
  jobDir: string;
  /** Start from the latest checkpoint in jobDir when there is one. */
  resume: boolean;
  modelPath: string;
  dtype: ModelDType;
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
  gradientCheckpointing: boolean;
  padTokenId: number;
  criticLr?: number;
  seed: number;
  numThreads?: number;
}

export interface TrainerStart {
  /** The step the trainer resumes from (0: a fresh start). */
  step: number;
  /** The component state saved with that checkpoint. */
  state: Record<string, unknown> | null;
  algorithmType: string;
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

  /** One training step; returns its metrics. */
  step(experiences: readonly Experience[], timeoutMs = 3_600_000): Promise<Record<string, number>> {
    return this.#worker.call('step', [experiences], { timeoutMs });
  }

  /** The weights to copy (by reference); call endSync() once they are copied. */
  async beginSync(timeoutMs = 600_000): Promise<Map<string, Tensor>> {
    const weights = await this.#worker.call<Record<string, Tensor>>('beginSync', [], { timeoutMs });
    return new Map(Object.entries(weights));
  }

  endSync(timeoutMs = 600_000): Promise<void> {
    return this.#worker.call('endSync', [], { timeoutMs });
  }

  saveWeights(dir: string, timeoutMs = 600_000): Promise<void> {
    return this.#worker.call('saveWeights', [dir], { timeoutMs });
  }

  /**
   * Saves checkpoint `step` (model or adapter, optimizer, critic and its optimizer, the trainer's own state, and the
   * given component state); returns its folder.
   */
  save(step: number, state: Record<string, unknown>, keep: number, timeoutMs = 600_000): Promise<string> {
    return this.#worker.call('save', [step, state, keep], { timeoutMs });
  }

  async close(): Promise<void> {
    try {
      await this.#worker.call('close', [], { timeoutMs: 60_000 });
    } finally {
      await this.#worker.terminate();
    }
  }
}
