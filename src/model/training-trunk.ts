// The trunk of forwardBackward (./training.ts): the forward through the decoder layers and the final norm, and the
// trunk's backward from the gradient the LM head's backward leaves on the final hidden states — at once, or, with
// activation checkpointing, layer by layer from the last, recomputing each layer from its saved input.
//
// Both run as generators that pause at the trunk's layer boundaries (PassPoint): before and after each layer's forward
// and, with checkpointing, before and after each layer's recomputation and backward. forwardBackward drives them
// straight through; a fully sharded trainer (../rft/trainer/fsdp.ts) awaits its collectives there: it gathers a
// layer's parameters before the layer runs, releases them after, and reduce-scatters the layer's gradients after its
// backward. Without checkpointing the backward is one autograd call over every layer, with no point inside it.
//
// beginTrunkPass starts the trunk's pass: the ids' embeddings, or a vision-language batch's (MultimodalInputs: image
// tokens in place, M-RoPE tables, and with DeepStack a layer step that adds the image features it carries).
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import type { LoadBalancing } from './moe.js';
import type { TrunkInput } from './packed-rows.js';
import type { CausalLM, ForwardPass } from './transformer.js';

/**
 * Where a forward/backward pass pauses: `start` before the embedding (the embedding, the final norm and the LM head
 * are read from then until `end`), around each decoder layer's forward and (with checkpointing) its backward, and
 * `end` once every gradient of the pass has been accumulated. A forward-only pass (tokenLogProbsSteps in
 * ./training.ts) starts with backward: false and has no backward points.
 */
export type PassPoint =
  | { at: 'start'; backward?: false }
  | { at: 'layer'; layer: number; phase: 'forward' | 'backward'; edge: 'before' | 'after' }
  | { at: 'end' };

/** A pass program: pauses at PassPoints, returns R. */
export type PassSteps<R> = Generator<PassPoint, R, void>;

/** Runs a pass program straight through (no work at its points). */
export function runPass<R>(steps: PassSteps<R>): R {
  for (;;) {
    const next = steps.next();
    if (next.done === true) return next.value;
  }
}

/** `steps` with each of its segments (between two pauses) run without gradient (torch.noGrad). */
export function* noGradSteps<R>(steps: PassSteps<R>): PassSteps<R> {
  for (;;) {
    const next = torch.noGrad(() => steps.next());
    if (next.done === true) return next.value;
    yield next.value;
  }
}

/**
 * Random numbers a forward draws (LoRA dropout: LoraModel), as a state that can be read and set. With activation
 * checkpointing forwardBackward sets the state each layer started from before recomputing it, so the recomputation
 * draws the masks the forward drew (torch.utils.checkpoint's preserve_rng_state), and leaves the state where the
 * forward left it.
 */
export interface ReplayableRandom<State> {
  randomState(): State;
  setRandomState(state: State): void;
}

/** The load-balancing loss of a pass and its weight (see ForwardBackwardOptions.routerAuxLoss). */
export interface RouterAux {
  balancing: LoadBalancing;
  weight: number;
  /** Set by the pass's onRouting while a layer is recomputed (checkpointing): that layer's term. */
  recomputed: Tensor | null;
  recomputing: boolean;
}

const layerPoint = (layer: number, phase: 'forward' | 'backward', edge: 'before' | 'after'): PassPoint => ({
  at: 'layer',
  layer,
  phase,
  edge,
});

/**
 * The trunk's forward (see the header); returns hiddenLeaf (the final norm's output, detached: the head's backward
 * leaves its gradient there) and backwardTrunk, the trunk's backward from hiddenLeaf.grad: at once, or, with
 * checkpoint, layer by layer from the last, recomputing each layer from its saved input (and, with `random`, the
 * random state it started from).
 */
export function* trunkForward(
  pass: ForwardPass,
  checkpoint: boolean,
  random: ReplayableRandom<unknown> | null,
  aux: RouterAux | null,
): PassSteps<{ hiddenLeaf: Tensor; backwardTrunk: () => PassSteps<void> }> {
  const layerInputs: Tensor[] = [];
  const layerRandom: unknown[] = []; // the random state each layer's forward started from (checkpointing)
  let randomAfterForward: unknown = null;
  let trunkOut: Tensor; // what the final norm reads: with checkpointing, a leaf that collects its gradient
  let trunkGraphEnd: Tensor | null = null; // without checkpointing, the trunk's graph ends here
  if (checkpoint) {
    let x = torch.noGrad(() => pass.embed());
    for (let i = 0; i < pass.numLayers; i++) {
      layerInputs.push(x);
      if (random !== null) layerRandom.push(random.randomState());
      yield layerPoint(i, 'forward', 'before');
      const input = x;
      x = torch.noGrad(() => pass.layer(i, input));
      yield layerPoint(i, 'forward', 'after');
    }
    if (random !== null) randomAfterForward = random.randomState();
    trunkOut = x.detach().requiresGrad_();
  } else {
    let x = pass.embed();
    for (let i = 0; i < pass.numLayers; i++) {
      yield layerPoint(i, 'forward', 'before');
      x = pass.layer(i, x);
      yield layerPoint(i, 'forward', 'after');
    }
    trunkOut = x;
    trunkGraphEnd = x;
  }
  pass.commit();
  const hidden = pass.norm(trunkOut);
  const hiddenLeaf = hidden.detach().requiresGrad_();

  // the trunk's backward from hiddenLeaf.grad: at once, or layer by layer recomputing each from its saved input
  // with a weighted load-balancing loss: backward of hidden . gradHidden + weight * aux (same gradients as both)
  const auxWeight = aux !== null && aux.weight !== 0 ? aux.weight : 0;
  function* backwardTrunk(): PassSteps<void> {
    const gradHidden = hiddenLeaf.grad;
    if (!hidden.requiresGrad || (gradHidden === null && auxWeight === 0)) return;
    if (auxWeight !== 0 && trunkGraphEnd !== null) {
      const auxLoss = (aux as RouterAux).balancing.loss().mul(auxWeight);
      (gradHidden === null ? auxLoss : hidden.mul(gradHidden).sum().add(auxLoss)).backward();
      return;
    }
    if (gradHidden !== null) hidden.backward(gradHidden);
    if (trunkGraphEnd !== null) return;
    // no gradient from the head (a loss of the aux term alone) still walks the layers for their aux terms
    let grad = trunkOut.grad ?? (auxWeight !== 0 ? torch.zerosLike(trunkOut) : null);
    for (let i = pass.numLayers - 1; i >= 0 && grad !== null; i--) {
      const layerIndex = i;
      const upstream: Tensor = grad;
      yield layerPoint(i, 'backward', 'before');
      grad = torch.scope(() => {
        const input = (layerInputs[layerIndex] as Tensor).detach().requiresGrad_();
        if (random !== null) random.setRandomState(layerRandom[layerIndex]);
        if (auxWeight === 0) pass.layer(layerIndex, input).backward(upstream);
        else {
          const rerun = aux as RouterAux;
          rerun.recomputing = true;
          rerun.recomputed = null;
          const output = pass.layer(layerIndex, input);
          rerun.recomputing = false;
          const term = rerun.recomputed as Tensor | null;
          (term === null ? output.mul(upstream).sum() : output.mul(upstream).sum().add(term.mul(auxWeight))).backward();
        }
        return input.grad;
      });
      yield layerPoint(i, 'backward', 'after');
    }
    if (random !== null) random.setRandomState(randomAfterForward);
    const embedded = pass.embed(); // frozen embeddings (LoRA) need no backward
    if (grad !== null && embedded.requiresGrad) embedded.backward(grad);
  }
  return { hiddenLeaf, backwardTrunk };
}

/** What a vision-language model gives the trunk for a batch of ids holding image tokens. */
export interface MultimodalInputs {
  /** [B, T, hidden] token embeddings with image tokens in place, made on each call (under the caller's grad mode). */
  embed(): Tensor;
  /** M-RoPE tables cos, sin [B, 1, T, headDim]. */
  rotary: { cos: Tensor; sin: Tensor };
  /**
   * Decoder layer `index` over the trunk's state x (default: the layer itself). DeepStack (Qwen3-VL) carries its
   * features as extra channels of the state from embed() on, and adds feature i to layer i's output here.
   */
  layer?(index: number, x: Tensor, decoderLayer: (x: Tensor) => Tensor): Tensor;
}

/** model.beginPass over the trunk's input; a vision-language batch's embeddings and M-RoPE tables replace the ids'. */
export function beginTrunkPass(model: CausalLM, input: TrunkInput, multimodal: MultimodalInputs | undefined): ForwardPass {
  if (multimodal === undefined) return model.beginPass(input.ids, input.forward);
  const pass = model.beginPass(input.ids, { ...input.forward, rotary: multimodal.rotary });
  return {
    numLayers: pass.numLayers,
    embed: () => multimodal.embed(),
    layer: (i, x) => (multimodal.layer === undefined ? pass.layer(i, x) : multimodal.layer(i, x, (h) => pass.layer(i, h))),
    norm: (x) => pass.norm(x),
    commit: () => pass.commit(),
  };
}
