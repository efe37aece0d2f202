// The sparse mixture-of-experts MLP (Qwen3MoeSparseMoeBlock, Qwen2MoeSparseMoeBlock in transformers) and its
// load-balancing loss.
//
//   h                                   [N, hidden]      N = batch * seq tokens
//   router_logits = h Wr^T              [N, E]           Wr = mlp.gate.weight [E, hidden]
//   p = softmax_f32(router_logits)      [N, E]
//   w, chosen = topk(p, k)              [N, k]           (norm_topk_prob) w = w / sum(w); w cast to h's dtype
//   y[n] = sum_j w[n, j] * expert_{chosen[n, j]}(h[n])   expert_e(x) = down_e(silu(gate_e(x)) * up_e(x))
//   (qwen2_moe) y[n] += sigmoid(h[n] . shared_expert_gate) * shared_expert(h[n])      every token, a SwiGLU too
//
// Computed by grouping, not token by token: the N*k (token, expert) pairs are sorted by expert (stable), the tokens
// gathered in that order (index_select), each expert's contiguous run goes through its three projections once, the
// rows are weighted and added back to their tokens (index_put_ with accumulate). The run lengths are read back to
// the host, so the block's shapes depend on the routing: a decode step of an MoE model cannot be captured or replayed
// as a CUDA graph (../engine/rollout-engine.ts runs such models eagerly).
//
// Load-balancing loss (Switch Transformer, arXiv 2101.03961, eqs. 4-6; transformers' load_balancing_loss_func),
// over the router logits of every sparse layer and the real tokens (mask) of the batch:
//   f_e = (sum over layers and real tokens of [e in topk(p, k)]) / R,   P_e = (sum of p_e) / R,   R = layers * tokens
//   aux = E * sum_e f_e P_e
// transformers adds router_aux_loss_coef * aux to the language-model loss (./training.ts does the same for SFT).
//
// Batch-invariant mode (./batch-invariant.ts; the block knows it by its projections: fixed-order): the router's and
// the experts' products, SiLU and the shared expert's sigmoid are per token whatever the batch, so which tokens share
// an expert's run changes no bits; each token's k weighted outputs are added in routing rank order (rankOrderSum)
// instead of by index_put_, whose accumulation order follows the batch on several threads. The rollout engine and
// the trainer then compute the same bits for a token (test/engine/bitwise-on-policy.test.ts).
//
// Router replay (R3, "rollout routing replay"; algorithm.enable_router_replay): a forward may be handed the experts
// a rollout chose for its tokens, replayed [N, k] (-1 rows: no record). Those tokens then go through the replayed
// experts instead of topk(p, k), weighted by the current router's probabilities of them:
//   chosen = replayed (recorded rows) else topk(p, k).indices,   w = p[chosen] (norm_topk_prob: w / sum(w))
// so the gradient reaches the router through w and the experts that produced the sample.
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import { activation } from './batch-invariant.js';
import type { MoeConfig } from './config.js';
import { type Linear, linear } from './linear.js';

/** One expert: a SwiGLU MLP, model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj. */
export interface Expert {
  gateProj: Linear;
  upProj: Linear;
  downProj: Linear;
}

/** A sparse layer's MLP: the router (model.layers.{i}.mlp.gate) and its experts. */
export interface SparseMoeBlock {
  router: Linear;
  experts: Expert[];
  topK: number;
  normTopkProb: boolean;
  /** qwen2_moe: mlp.shared_expert and its gate mlp.shared_expert_gate ([1, hidden]); null for qwen3_moe. */
  shared: { expert: Expert; gate: Linear } | null;
}

/** down(silu(gate(x)) * up(x)); batch-invariant SiLU when the products are fixed-order (see the header). */
const swiGlu = (x: Tensor, expert: Expert): Tensor => {
  const gate = activation(linear(x, expert.gateProj), 'silu', expert.downProj.packed?.fixedOrder === true);
  return linear(gate.mul(linear(x, expert.upProj)), expert.downProj);
};

/** The router's decision for N tokens. */
export interface Routing {
  /** [N, E] in the model dtype. */
  logits: Tensor;
  /** [N, k] int64: the chosen experts, most probable first. */
  experts: Tensor;
  /** [N, k] in the model dtype: their weights. */
  weights: Tensor;
}

/** The router of `block` over h [N, hidden]; `replayed` [N, k] int64 (-1 rows: none) overrides its choice (see the header). */
export function route(block: SparseMoeBlock, h: Tensor, replayed?: Tensor | null): Routing {
  const logits = linear(h, block.router);
  const probs = logits.softmax(-1, 'float32');
  const top = probs.topk(block.topK, { dim: -1 });
  let experts = top.indices;
  let chosen = top.values;
  if (replayed) {
    if (replayed.size(0) !== h.size(0) || replayed.size(1) !== block.topK)
      throw new RangeError(
        `router replay: [${replayed.shape.join(', ')}] recorded experts for ${h.size(0)} tokens of top-${block.topK} routing`,
      );
    experts = torch.where(replayed.ge(0), replayed, top.indices);
    chosen = probs.gather(-1, experts);
  }
  const weights = block.normTopkProb ? chosen.div(chosen.sum(-1, { keepdim: true })) : chosen;
  return { logits, experts, weights: weights.to({ dtype: h.dtype }) };
}

/**
 * The block over h [B, T, hidden] → [B, T, hidden]; `onRouting` receives the router's decision (for the
 * load-balancing loss, the engine's record of the routed experts and tests); `replayed` [B*T, k]: see route().
 */
export function sparseMoe(
  block: SparseMoeBlock,
  h: Tensor,
  onRouting?: (routing: Routing) => void,
  replayed?: Tensor | null,
): Tensor {
  const shape = h.shape;
  const hidden = h.size(-1);
  const flat = h.reshape([-1, hidden]); // [N, hidden]
  const tokens = flat.size(0);
  const routing = route(block, flat, replayed);
  onRouting?.(routing);
  const k = block.topK;
  // (token, expert) pairs in expert order; a stable sort keeps each expert's tokens in token order
  const pairExperts = routing.experts.reshape([-1]); // [N k]
  const order = pairExperts.argsort({ stable: true });
  const pairTokens = torch.arange(tokens, { device: h.device }).repeatInterleave(k, 0).indexSelect(0, order);
  const pairWeights = routing.weights.reshape([-1]).indexSelect(0, order).unsqueeze(1); // [N k, 1]
  const counts = expertCounts(pairExperts, block.experts.length);
  const runs = flat.indexSelect(0, pairTokens).split(counts, 0);
  const outputs = runs.map((x, e) => {
    const expert = block.experts[e] as Expert;
    return x.size(0) === 0 ? x : swiGlu(x, expert);
  });
  const weighted = torch.cat(outputs, 0).mul(pairWeights); // [N k, hidden]
  const routed = block.router.packed?.fixedOrder
    ? rankOrderSum(weighted, order, tokens, k)
    : // index_put_ with accumulate adds each row into its token's row (ATen's scatter_add over an expanded index
      // takes a slow path on the CPU: bench/README.md, moe-experts)
      torch.zeros([tokens, hidden], { dtype: h.dtype, device: h.device }).indexPut_([pairTokens], weighted, true);
  const shared = block.shared;
  if (shared === null) return routed.reshape(shape);
  const gate = activation(linear(flat, shared.gate), 'sigmoid', shared.gate.packed?.fixedOrder === true);
  return routed.add(gate.mul(swiGlu(flat, shared.expert))).reshape(shape);
}

/**
 * The batch-invariant mode's sum of each token's k weighted expert outputs (rows of `weighted` [N k, hidden] in
 * `order`, the expert-sorted pair order): y[n] = ((c[n, 0] + c[n, 1]) + ...) + c[n, k − 1] in routing rank order,
 * elementwise adds whatever the batch, where index_put_'s accumulation order follows the pairs' places in the batch.
 */
function rankOrderSum(weighted: Tensor, order: Tensor, tokens: number, k: number): Tensor {
  const byToken = weighted.indexSelect(0, order.argsort()).view([tokens, k, -1]); // pair n·k + j back at its place
  let sum = byToken.select(1, 0);
  for (let j = 1; j < k; j++) sum = sum.add(byToken.select(1, j));
  return sum;
}

/** How many of the pairs each expert got (read back to the host: the split sizes). */
function expertCounts(pairExperts: Tensor, numExperts: number): number[] {
  return torch.noGrad(() => {
    const ids = torch.arange(numExperts, { device: pairExperts.device });
    return pairExperts.unsqueeze(1).eq(ids).long().sum(0).toArray() as number[];
  });
}

/**
 * The load-balancing loss (see the header) over each sparse layer's router logits [N, E]; `realTokens` [N] (1 = a
 * real token) leaves padding out. A float32 scalar.
 */
export function loadBalancingLoss(routerLogits: readonly Tensor[], moe: MoeConfig, realTokens?: Tensor): Tensor {
  const balancing = new LoadBalancing(moe, realTokens ?? null);
  for (const logits of routerLogits) balancing.observe(logits);
  return balancing.loss();
}

/**
 * The load-balancing loss of one pass, gathered as its sparse layers run. The top-k counts C carry no gradient, so
 * given the forward's counts the loss is a sum of one term per layer, each differentiable through that layer alone:
 *   aux = sum over sparse layers l of  sum_e (E C_e / R^2) * sum_n mask_n p_{l,n,e}      (= E sum_e f_e P_e)
 * which lets activation checkpointing (./training.ts) take each layer's term when it recomputes that layer.
 */
export class LoadBalancing {
  readonly #moe: MoeConfig;
  readonly #mask: Tensor | null; // [N, 1] float32
  #chosen: Tensor | null = null; // [E], summed over layers and real tokens
  readonly #probabilities: Tensor[] = []; // per layer [E]
  #layers = 0;
  #rowsPerLayer = 0; // N

  constructor(moe: MoeConfig, realTokens: Tensor | null) {
    this.#moe = moe;
    this.#mask = realTokens === null ? null : realTokens.float().reshape([-1, 1]);
  }

  /** Adds one sparse layer's router logits [N, E]. */
  observe(logits: Tensor): void {
    const chosen = torch.noGrad(() => {
      const top = logits.softmax(-1, 'float32').topk(this.#moe.numExpertsPerTok, { dim: -1 }).indices;
      const hits = top
        .unsqueeze(-1)
        .eq(torch.arange(this.#moe.numExperts, { device: logits.device }))
        .float()
        .sum(1);
      return this.#masked(hits); // [E]
    });
    this.#chosen = this.#chosen === null ? chosen : this.#chosen.add(chosen);
    this.#probabilities.push(this.#masked(logits.softmax(-1, 'float32')));
    this.#layers++;
  }

  /** aux over the layers observed (differentiable through their logits where those carry a graph). */
  loss(): Tensor {
    return this.#perExpert().mul(torch.stack(this.#probabilities).sum(0)).sum();
  }

  /** One layer's term of loss() over its router logits [N, E] (the same layer recomputed), after every layer was observed. */
  layerTerm(logits: Tensor): Tensor {
    return this.#perExpert()
      .mul(this.#masked(logits.softmax(-1, 'float32')))
      .sum();
  }

  /** E C_e / R^2 (no gradient), so that aux = sum_e of it times P_e (C, P: counts and probabilities summed). */
  #perExpert(): Tensor {
    const chosen = this.#chosen;
    if (chosen === null) throw new RangeError('LoadBalancing: no router logits (the model has no sparse layer)');
    return torch.noGrad(() => {
      const rows = this.#mask === null ? this.#rowsPerLayer * this.#layers : this.#mask.sum().mul(this.#layers);
      return chosen.div(rows).div(rows).mul(this.#moe.numExperts);
    });
  }

  /** Sum over real tokens of [N, E] → [E]. */
  #masked(perToken: Tensor): Tensor {
    this.#rowsPerLayer = perToken.size(0);
    return this.#mask === null ? perToken.sum(0) : perToken.mul(this.#mask).sum(0);
  }
}
