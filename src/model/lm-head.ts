// The LM head of the training forward (./training.ts): per-token statistics of the next tokens from logits, and the
// head over a whole pass for forwardBackward and value-only forwards. The pass computes the logits of as many
// positions as fit `keepBytes` in one product (the rest one chunk at a time), reads the statistics chunk by chunk (the
// float32 temporaries of one chunk at a time), and its backward takes d loss / d logProbs (and d loss / d entropy)
// straight to d loss / d logits in closed form, written over the kept logits, then through the head's product once:
//
//   z = head(h)  (the model's dtype, with a graph back to h and the head's weight),  x = float(z) / τ
//   ℓ = log softmax(x),  p = softmax(x),  logProbs_t = ℓ[target],  H = −Σ_v p_v ℓ_v
//   d logProbs_t / d x_v = δ_{v,target} − p_v            d H / d x_v = −p_v (ℓ_v + H)
//   d loss / d z_v = (g_t (δ_{v,target} − p_v) − g_H p_v (ℓ_v + H)) / τ,   g_t = d loss / d logProbs_t, g_H = d loss / d H
//
// So the head's product runs 3 times per position (forward, and the two products of its backward) where running the
// head again in the backward ran it 4 times; over the kept positions each of the three is one product (not one per
// chunk, whose weight gradients were each added into the head's); and the backward skips autograd's log-softmax,
// gather and cast nodes (a zero-filled [.., V] gradient, a log-softmax backward, a cast) for one softmax, one multiply
// and one cast. On the CPU chunks are small by default (headChunkSize: a chunk's float32 logits within 32 MiB): larger
// temporaries go back to the operating system when freed and are page-faulted in again on every chunk
// (bench/README.md, bench:long-grpo).
//
// Memory: the kept logits [B, n, V] in the model's dtype (on a CPU whose bfloat16 products run in float32 on widened
// copies, the head's weight widened once more) within keepBytes, plus one chunk's float32 temporaries; positions past
// the budget are computed without a graph in the forward and run the head again in the backward, chunk by chunk. The
// values are the same bits either way (logitStatistics' ops on the same logits); the gradients equal autograd's
// through logitStatistics within float32 rounding (softmax(x) for exp(log softmax(x)); tested).
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import type { HeadTemperature } from './packed-rows.js';
import type { CausalLM } from './transformer.js';

/** Logits one pass keeps (computed in one product) by default: 1 GiB (see the header). */
export const DEFAULT_KEEP_LOGITS_BYTES = 2 ** 30;

/** A default chunk's float32 logits at most (see the header). */
const CHUNK_BYTES = 32 * 2 ** 20;

/**
 * Positions per head chunk: `given`; else on the CPU as many as keep a chunk's float32 logits [rows, n, vocab] within
 * 32 MiB (at least 1, at most 256; see the header), elsewhere 256 (a GPU's caching allocator reuses its blocks).
 */
export function headChunkSize(given: number | undefined, rows: number, vocab: number, device: string): number {
  if (given !== undefined) {
    if (!Number.isInteger(given) || given < 1) throw new RangeError(`chunkSize must be a positive integer, got ${given}`);
    return given;
  }
  if (device !== 'cpu') return 256;
  return Math.max(1, Math.min(256, Math.floor(CHUNK_BYTES / (4 * rows * vocab))));
}

/** [start, size) spans of `size` over [0, length). */
export function chunkSpans(length: number, size: number): [number, number][] {
  const out: [number, number][] = [];
  for (let start = 0; start < length; start += size) out.push([start, Math.min(size, length - start)]);
  return out;
}

/** x = float(z) / τ: the logits the statistics read. */
function scaledLogits(logits: Tensor, temperature: HeadTemperature): Tensor {
  const x = logits.float();
  return temperature === 1 ? x : x.div(temperature);
}

export interface TokenLogProbs {
  /** [B, T-1] float32: log-probability of inputIds[:, t+1] after inputIds[:, :t+1]. */
  logProbs: Tensor;
  /** [B, T-1] float32, when requested. */
  entropy: Tensor | null;
}

/** tokenLogProbs' result: TokenLogProbs and, when requested, necs. */
export interface TokenStatistics extends TokenLogProbs {
  /** [B, T-1] float32, when requested. */
  necs: Tensor | null;
}

/**
 * log p(targets) and, on request, entropy and necs (./training.ts's header) from (temperature-scaled) logits [..., V] →
 * [...]. necs asks for the entropy too, as it needs it.
 */
export function logitStatistics(logits: Tensor, targets: Tensor, want: { entropy: boolean; necs?: boolean }): TokenStatistics {
  // one fused log-softmax serves both (measured ~1.8x faster forward+backward than logsumexp + gather)
  const logSoftmax = logits.logSoftmax(-1); // [..., V]
  const logProbs = logSoftmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
  if (!want.entropy && !want.necs) return { logProbs, entropy: null, necs: null };
  const p = logSoftmax.exp();
  const entropy = p.mul(logSoftmax).sum(-1).neg();
  if (!want.necs) return { logProbs, entropy, necs: null };
  const p2 = p.square();
  const necs = entropy.mul(p2.sum(-1)).add(p2.mul(logSoftmax).sum(-1));
  return { logProbs, entropy, necs };
}

/** logitStatistics of one chunk of final hidden states [B, c, H] → [B, c], recorded by autograd where grad mode is on. */
export function headChunk(
  model: CausalLM,
  hidden: Tensor,
  targets: Tensor,
  temperature: HeadTemperature,
  withEntropy: boolean,
  withNecs = false,
): TokenStatistics {
  return logitStatistics(scaledLogits(model.logits(hidden), temperature), targets, { entropy: withEntropy, necs: withNecs });
}

/** The head over a pass: the statistics of the forward, and (recorded passes) the backward that takes their gradients. */
export interface HeadPass extends TokenStatistics {
  /** Positions (of the head's T') whose logits one product computed and, recorded, kept for the backward. */
  readonly keptPositions: number;
  /**
   * Accumulates d loss / d (hidden states, head parameters) from d loss / d logProbs and d loss / d entropy ([B, T'],
   * null: the loss does not read them); then the kept logits are freed. Recorded passes only, once.
   */
  backward(gradLogProbs: Tensor | null, gradEntropy: Tensor | null): void;
}

/** What the head pass reads: the final hidden states [B, T', hidden] and targets [B, T'] of the head's layout. */
export interface HeadPassInput {
  hidden: Tensor;
  targets: Tensor;
  /** Positions per chunk (headChunkSize). */
  chunkSize: number;
  temperatureAt: (start: number, size: number) => HeadTemperature;
  withEntropy: boolean;
  withNecs?: boolean;
  /** Bytes of logits one product computes and keeps (DEFAULT_KEEP_LOGITS_BYTES; 0: every chunk on its own). */
  keepBytes: number;
  /** Keep the graph of the head's product for backward() (forwardBackward); else values only, without a graph. */
  record: boolean;
}

/**
 * Bytes per position of the kept logits (the widened weight of a CPU whose bf16 products run in float32 aside), and
 * that weight: torch.linear there widens the head's weight, and a recorded product's graph saves the copy.
 */
function keptBytes(model: CausalLM, rows: number, device: string): { perPosition: number; fixed: number } {
  const { vocabSize, hiddenSize } = model.config;
  const widened = device === 'cpu' && model.dtype === 'bfloat16' && torch.packedLinearSupported() && !torch.cpuHasBf16Matmul();
  return { perPosition: rows * vocabSize * torch.DTYPE_BYTES[model.dtype], fixed: widened ? vocabSize * hiddenSize * 4 : 0 };
}

/** The head's forward over a pass (see the header); run inside the pass's scope. */
export function headPass(model: CausalLM, input: HeadPassInput): HeadPass {
  const { hidden, targets, chunkSize, temperatureAt, withEntropy, record } = input;
  if (!(input.keepBytes >= 0)) throw new RangeError(`keepLogitsBytes must be a number >= 0, got ${input.keepBytes}`);
  const length = targets.size(1);
  const bytes = keptBytes(model, hidden.size(0), hidden.device);
  // the kept positions: whole chunks whose logits fit the budget
  const fitting = Math.floor(Math.max(0, input.keepBytes - bytes.fixed) / bytes.perPosition);
  const keptPositions = Math.min(length, Math.floor(fitting / chunkSize) * chunkSize);
  const product = (start: number, size: number) => model.logits(hidden.narrow(1, start, size));
  let kept = keptPositions === 0 ? null : record ? product(0, keptPositions) : torch.noGrad(() => product(0, keptPositions));
  const spans = chunkSpans(length, chunkSize);
  const parts = torch.noGrad(() =>
    spans.map(([start, size]) =>
      torch.scope(() => {
        const logits = start < keptPositions ? (kept as Tensor).detach().narrow(1, start, size) : product(start, size);
        const x = scaledLogits(logits, temperatureAt(start, size));
        return logitStatistics(x, targets.narrow(1, start, size), { entropy: withEntropy, necs: input.withNecs ?? false });
      }),
    ),
  );
  if (!record) kept?.dispose();
  const joined = (field: keyof TokenStatistics, wanted: boolean) =>
    wanted
      ? torch.cat(
          parts.map((p) => p[field] as Tensor),
          1,
        )
      : null;
  const entropy = joined('entropy', withEntropy);
  return {
    logProbs: joined('logProbs', true) as Tensor,
    entropy,
    necs: joined('necs', input.withNecs ?? false),
    keptPositions,
    backward(gradLogProbs, gradEntropy) {
      if (!record) throw new Error('headPass: backward() of a pass made without a graph (record: false)');
      if (gradEntropy !== null && entropy === null) throw new Error('headPass: an entropy gradient for a pass without entropy');
      const logitsGradient = (logits: Tensor, start: number, size: number) =>
        closedFormGradient(logits, targets.narrow(1, start, size), temperatureAt(start, size), {
          logProbs: gradLogProbs?.narrow(1, start, size) ?? null,
          entropy: gradEntropy && { grad: gradEntropy.narrow(1, start, size), value: (entropy as Tensor).narrow(1, start, size) },
        });
      const wanted = gradLogProbs !== null || gradEntropy !== null;
      if (kept !== null && wanted) {
        // d loss / d z over the kept logits, chunk by chunk in place, then one backward through the product
        const gradient = kept.detach();
        torch.noGrad(() => {
          for (const [start, size] of spans.filter(([s]) => s < keptPositions))
            torch.scope(() => {
              const chunk = gradient.narrow(1, start, size);
              chunk.copy_(logitsGradient(chunk, start, size));
            });
        });
        kept.backward(gradient);
      }
      kept?.dispose();
      kept = null;
      if (!wanted) return;
      for (const [start, size] of spans.filter(([s]) => s >= keptPositions))
        torch.scope(() => {
          const logits = product(start, size);
          logits.backward(torch.noGrad(() => logitsGradient(logits.detach(), start, size)));
        });
    },
  };
}

/**
 * d loss / d z for logits z [B, n, V] (see the header), in z's dtype, from the gradients with respect to the chunk's
 * log-probs g_t [B, n] and entropy g_H [B, n] (with the entropy's forward value H); not both absent.
 */
function closedFormGradient(
  logits: Tensor,
  targets: Tensor,
  temperature: HeadTemperature,
  grads: { logProbs: Tensor | null; entropy: { grad: Tensor; value: Tensor } | null },
): Tensor {
  const x = scaledLogits(logits, temperature);
  const overTemperature = (t: Tensor) => (temperature === 1 ? t : t.div(temperature));
  const gradLogProbs = grads.logProbs === null ? null : overTemperature(grads.logProbs.float().unsqueeze(-1)); // g_t / τ
  let gradX: Tensor; // [B, n, V] float32
  if (grads.entropy === null) {
    // −p g_t / τ
    gradX = x.softmax(-1).mul_((gradLogProbs as Tensor).neg());
  } else {
    // −p (g_t + g_H (ℓ + H)) / τ
    const logSoftmax = x.logSoftmax(-1);
    const p = logSoftmax.exp();
    const { grad, value } = grads.entropy;
    gradX = logSoftmax.add_(value.unsqueeze(-1)).mul_(overTemperature(grad.float().unsqueeze(-1)));
    if (gradLogProbs !== null) gradX.add_(gradLogProbs);
    gradX.mul_(p).mul_(-1);
  }
  if (gradLogProbs !== null) {
    // + g_t / τ at each position's target
    const flat = gradX.view([-1, gradX.size(-1)]);
    const positions = torch.arange(flat.size(0), { dtype: 'int64', device: logits.device });
    flat.indexPut_([positions, targets.reshape([-1])], gradLogProbs.reshape([-1]), true);
  }
  return gradX.to(logits.dtype);
}
