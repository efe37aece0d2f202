// The training forward: per-token log-probabilities (and entropy) of the next tokens, chunked over the sequence so
// that at most one chunk of full-vocabulary logits exists at a time, and a forward+backward that keeps that bound
// under autograd too, optionally with activation checkpointing (one decoder layer's activations at a time).
//
//   logProbs[b, t] = log softmax(logits[b, t] / temperature)[inputIds[b, t + 1]]            [B, T-1]
//   entropy[b, t]  = -sum_v p_v log p_v,  p = softmax(logits[b, t] / temperature)
//
// forwardBackward(model, ids, lossFn) computes loss = lossFn({logProbs, entropy}) and accumulates d loss / d params
// into the parameters' .grad in three passes:
//   1. trunk forward (layer inputs saved, no graph, when checkpointing) and the LM head chunk by chunk without a
//      graph, giving logProbs and entropy as leaf tensors;
//   2. lossFn on those leaves and its backward: d loss / d logProbs and d loss / d entropy (small, [B, T-1]);
//   3. per chunk, the head again with a graph, backward with those gradients into the final hidden states; then
//      the trunk backward: at once, or layer by layer from the last, recomputing each layer from its saved input.
// The result equals plain autograd through lossFn(tokenLogProbs(...)) (tested), with far less memory.
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import type { CausalLM, ForwardOptions } from './transformer.js';

export interface TokenLogProbsOptions {
  /** [B, T], 1 = real token (padding anywhere); positions follow forward()'s rules. */
  attentionMask?: Tensor;
  positionIds?: Tensor;
  /** Sequence positions per LM-head chunk (default 256). */
  chunkSize?: number;
  /** Also return per-token entropy. */
  entropy?: boolean;
  /** Divide logits by this before the softmax, as the sampler does (default 1). */
  temperature?: number;
}

export interface TokenLogProbs {
  /** [B, T-1] float32: log-probability of inputIds[:, t+1] after inputIds[:, :t+1]. */
  logProbs: Tensor;
  /** [B, T-1] float32, when requested. */
  entropy: Tensor | null;
}

/** log p(next token) and entropy for one chunk of final hidden states [B, c, H] → [B, c]. */
function headChunk(model: CausalLM, hidden: Tensor, targets: Tensor, temperature: number, withEntropy: boolean): TokenLogProbs {
  let logits = model.logits(hidden).float();
  if (temperature !== 1) logits = logits.div(temperature);
  // one fused log-softmax serves both (measured ~1.8x faster forward+backward than logsumexp + gather)
  const logSoftmax = logits.logSoftmax(-1); // [B, c, V]
  const logProbs = logSoftmax.gather(-1, targets.unsqueeze(-1)).squeeze(-1);
  if (!withEntropy) return { logProbs, entropy: null };
  return { logProbs, entropy: logSoftmax.exp().mul(logSoftmax).sum(-1).neg() };
}

function chunks(length: number, size: number): [number, number][] {
  const out: [number, number][] = [];
  for (let start = 0; start < length; start += size) out.push([start, Math.min(size, length - start)]);
  return out;
}

function checkInputs(inputIds: Tensor, options: TokenLogProbsOptions): { chunkSize: number; temperature: number } {
  if (inputIds.ndim !== 2 || inputIds.size(1) < 2) {
    throw new TypeError(`token log-probs need inputIds [batch, seq >= 2], got [${inputIds.shape.join(', ')}]`);
  }
  const chunkSize = options.chunkSize ?? 256;
  const temperature = options.temperature ?? 1;
  if (!Number.isInteger(chunkSize) || chunkSize < 1)
    throw new RangeError(`chunkSize must be a positive integer, got ${chunkSize}`);
  if (!(temperature > 0)) throw new RangeError(`temperature must be > 0, got ${temperature}`);
  return { chunkSize, temperature };
}

function passOptions(options: TokenLogProbsOptions): ForwardOptions {
  return {
    ...(options.attentionMask ? { attentionMask: options.attentionMask } : {}),
    ...(options.positionIds ? { positionIds: options.positionIds } : {}),
  };
}

/**
 * Per-token log-probabilities (and entropy) of the next tokens. Records autograd when grad mode is on and the
 * parameters require grad (then every chunk's graph is kept until backward: use forwardBackward to bound memory).
 */
export function tokenLogProbs(model: CausalLM, inputIds: Tensor, options: TokenLogProbsOptions = {}): TokenLogProbs {
  const { chunkSize, temperature } = checkInputs(inputIds, options);
  return torch.scope(() => {
    const hidden = model.forward(inputIds, { ...passOptions(options), output: 'hidden' });
    const length = inputIds.size(1) - 1;
    const targets = inputIds.slice(1, 1);
    const parts = chunks(length, chunkSize).map(([start, size]) =>
      headChunk(model, hidden.narrow(1, start, size), targets.narrow(1, start, size), temperature, options.entropy ?? false),
    );
    const logProbs =
      parts.length === 1
        ? (parts[0] as TokenLogProbs).logProbs
        : torch.cat(
            parts.map((p) => p.logProbs),
            1,
          );
    const entropy = options.entropy
      ? torch.cat(
          parts.map((p) => p.entropy as Tensor),
          1,
        )
      : null;
    return { logProbs, entropy };
  });
}

export interface ForwardBackwardOptions extends TokenLogProbsOptions {
  /** Recompute each decoder layer during backward instead of keeping its activations (default false). */
  checkpoint?: boolean;
}

export interface ForwardBackwardResult {
  loss: number;
  /** Detached [B, T-1] float32 values, for metrics. */
  logProbs: Tensor;
  entropy: Tensor | null;
}

/**
 * loss = lossFn({ logProbs, entropy }) and its gradients accumulated into the parameters' .grad, holding at most one
 * chunk of full-vocabulary activations (and, with checkpoint, one layer's activations). See the header comment.
 */
export function forwardBackward(
  model: CausalLM,
  inputIds: Tensor,
  lossFn: (inputs: TokenLogProbs) => Tensor,
  options: ForwardBackwardOptions = {},
): ForwardBackwardResult {
  const { chunkSize, temperature } = checkInputs(inputIds, options);
  if (options.checkpoint && model.isStochastic) {
    throw new Error(
      'activation checkpointing recomputes each layer, so dropout would draw a different mask than the forward did: ' +
        'use LoRA dropout 0, eval mode, or checkpoint: false',
    );
  }
  const withEntropy = options.entropy ?? false;
  return torch.scope(() => {
    const pass = model.beginPass(inputIds, passOptions(options));

    // 1. trunk forward
    const layerInputs: Tensor[] = [];
    let trunkOut: Tensor; // what the final norm reads: with checkpointing, a leaf that collects its gradient
    let trunkGraphEnd: Tensor | null = null; // without checkpointing, the trunk's graph ends here
    if (options.checkpoint) {
      const last = torch.noGrad(() => {
        let x = pass.embed();
        for (let i = 0; i < pass.numLayers; i++) {
          layerInputs.push(x);
          x = pass.layer(i, x);
        }
        return x;
      });
      trunkOut = last.detach().requiresGrad_();
    } else {
      let x = pass.embed();
      for (let i = 0; i < pass.numLayers; i++) x = pass.layer(i, x);
      trunkOut = x;
      trunkGraphEnd = x;
    }
    pass.commit();
    const hidden = pass.norm(trunkOut);
    const hiddenLeaf = hidden.detach().requiresGrad_();

    // the trunk's backward from hiddenLeaf.grad: at once, or layer by layer recomputing each from its saved input
    const backwardTrunk = () => {
      const gradHidden = hiddenLeaf.grad;
      if (gradHidden === null || !hidden.requiresGrad) return;
      hidden.backward(gradHidden);
      if (trunkGraphEnd !== null) return;
      let grad = trunkOut.grad;
      for (let i = pass.numLayers - 1; i >= 0 && grad !== null; i--) {
        const layerIndex = i;
        const upstream: Tensor = grad;
        grad = torch.scope(() => {
          const input = (layerInputs[layerIndex] as Tensor).detach().requiresGrad_();
          pass.layer(layerIndex, input).backward(upstream);
          return input.grad;
        });
      }
      const embedded = pass.embed(); // frozen embeddings (LoRA) need no backward
      if (grad !== null && embedded.requiresGrad) embedded.backward(grad);
    };

    const length = inputIds.size(1) - 1;
    const targets = inputIds.slice(1, 1);
    const spans = chunks(length, chunkSize);
    if (spans.length === 1) {
      // the whole sequence is one chunk: one head pass with its graph, the loss straight through it
      const part = headChunk(model, hiddenLeaf.narrow(1, 0, length), targets, temperature, withEntropy);
      const loss = lossFn(part);
      if (loss.numel !== 1) throw new TypeError(`lossFn must return a scalar, got shape [${loss.shape.join(', ')}]`);
      const lossValue = loss.item();
      loss.backward();
      backwardTrunk();
      return { loss: lossValue, logProbs: part.logProbs.detach(), entropy: part.entropy?.detach() ?? null };
    }

    // 1b. the head chunk by chunk, values only
    const values = torch.noGrad(() => {
      const parts = spans.map(([s, n]) =>
        headChunk(model, hiddenLeaf.narrow(1, s, n), targets.narrow(1, s, n), temperature, withEntropy),
      );
      return {
        logProbs: torch.cat(
          parts.map((p) => p.logProbs),
          1,
        ),
        entropy: withEntropy
          ? torch.cat(
              parts.map((p) => p.entropy as Tensor),
              1,
            )
          : null,
      };
    });
    const logProbsLeaf = values.logProbs.detach().requiresGrad_();
    const entropyLeaf = values.entropy?.detach().requiresGrad_() ?? null;

    // 2. the loss and its gradient with respect to the per-token values
    const loss = lossFn({ logProbs: logProbsLeaf, entropy: entropyLeaf });
    if (loss.numel !== 1) throw new TypeError(`lossFn must return a scalar, got shape [${loss.shape.join(', ')}]`);
    const lossValue = loss.item();
    loss.backward();
    const gradLogProbs = logProbsLeaf.grad;
    const gradEntropy = entropyLeaf?.grad ?? null;

    // 3. the head again with a graph, one chunk at a time, into hiddenLeaf.grad (and the LM head's weight)
    if (gradLogProbs !== null || gradEntropy !== null) {
      for (const [s, n] of spans) {
        torch.scope(() => {
          const part = headChunk(model, hiddenLeaf.narrow(1, s, n), targets.narrow(1, s, n), temperature, gradEntropy !== null);
          let surrogate = gradLogProbs === null ? null : part.logProbs.mul(gradLogProbs.narrow(1, s, n)).sum();
          if (gradEntropy !== null && part.entropy !== null) {
            const term = part.entropy.mul(gradEntropy.narrow(1, s, n)).sum();
            surrogate = surrogate === null ? term : surrogate.add(term);
          }
          surrogate?.backward();
        });
      }
      backwardTrunk();
    }
    return { loss: lossValue, logProbs: values.logProbs, entropy: values.entropy };
  });
}
