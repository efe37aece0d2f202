// The sparse mixture-of-experts MLP (Qwen3MoeSparseMoeBlock in transformers) and its load-balancing loss.
//
//   h                                   [N, hidden]      N = batch * seq tokens
//   router_logits = h Wr^T              [N, E]           Wr = mlp.gate.weight [E, hidden]
//   p = softmax_f32(router_logits)      [N, E]
//   w, chosen = topk(p, k)              [N, k]           (norm_topk_prob) w = w / sum(w); w cast to h's dtype
//   y[n] = sum_j w[n, j] * expert_{chosen[n, j]}(h[n])   expert_e(x) = down_e(silu(gate_e(x)) * up_e(x))
//
// Computed by grouping, not token by token: the N*k (token, expert) pairs are sorted by expert (stable), the tokens
// gathered in that order (index_select), each expert's contiguous run goes through its three projections once,
// the rows are weighted and scatter-added back to their tokens. The run lengths are read back to the host, so the
// block's shapes depend on the routing: a decode step of an MoE model cannot be captured or replayed as a CUDA graph
// (../engine/rollout-engine.ts runs such models eagerly).
//
// Load-balancing loss (Switch Transformer, arXiv 2101.03961, eqs. 4-6; transformers' load_balancing_loss_func),
// over the router logits of every sparse layer and the real tokens (mask) of the batch:
//   f_e = (sum over layers and real tokens of [e in topk(p, k)]) / R,   P_e = (sum of p_e) / R,   R = layers * tokens
//   aux = E * sum_e f_e P_e
// transformers adds router_aux_loss_coef * aux to the language-model loss (./training.ts does the same for SFT).
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
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
}

/** The router's decision for N tokens. */
export interface Routing {
  /** [N, E] in the model dtype. */
  logits: Tensor;
  /** [N, k] int64: the chosen experts, most probable first. */
  experts: Tensor;
  /** [N, k] in the model dtype: their weights. */
  weights: Tensor;
}

/** The router of `block` over h [N, hidden]. */
export function route(block: SparseMoeBlock, h: Tensor): Routing {
  const logits = linear(h, block.router);
  const probs = logits.softmax(-1, 'float32');
  const top = probs.topk(block.topK, { dim: -1 });
  const weights = block.normTopkProb ? top.values.div(top.values.sum(-1, { keepdim: true })) : top.values;
  return { logits, experts: top.indices, weights: weights.to({ dtype: h.dtype }) };
}

/**
 * The block over h [B, T, hidden] → [B, T, hidden]; `onRouting` receives the router's decision (for the
 * load-balancing loss and for tests of the routed experts).
 */
export function sparseMoe(block: SparseMoeBlock, h: Tensor, onRouting?: (routing: Routing) => void): Tensor {
  const shape = h.shape;
  const hidden = h.size(-1);
  const flat = h.reshape([-1, hidden]); // [N, hidden]
  const tokens = flat.size(0);
  const routing = route(block, flat);
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
    return x.size(0) === 0 ? x : linear(linear(x, expert.gateProj).silu().mul(linear(x, expert.upProj)), expert.downProj);
  });
  const weighted = torch.cat(outputs, 0).mul(pairWeights); // [N k, hidden]
  const into = torch.zeros([tokens, hidden], { dtype: h.dtype, device: h.device });
  return into.scatterAdd(0, pairTokens.unsqueeze(1).expand([tokens * k, hidden]), weighted).reshape(shape);
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
  if (routerLogits.length === 0) throw new RangeError('loadBalancingLoss: no router logits (the model has no sparse layer)');
  const E = moe.numExperts;
  let chosen: Tensor | null = null; // [E]
  let probability: Tensor | null = null; // [E]
  let rows: Tensor | number = 0;
  const mask = realTokens?.float().unsqueeze(1); // [N, 1]
  for (const logits of routerLogits) {
    const probs = logits.softmax(-1, 'float32'); // [N, E]
    const top = torch.noGrad(() => probs.topk(moe.numExpertsPerTok, { dim: -1 }).indices);
    // one-hot of the chosen experts summed over k: [N, E]
    const hits = top
      .unsqueeze(-1)
      .eq(torch.arange(E, { device: logits.device }))
      .float()
      .sum(1);
    const c = mask === undefined ? hits.sum(0) : hits.mul(mask).sum(0);
    const p = mask === undefined ? probs.sum(0) : probs.mul(mask).sum(0);
    chosen = chosen === null ? c : chosen.add(c);
    probability = probability === null ? p : probability.add(p);
    rows = mask === undefined ? (rows as number) + logits.size(0) : mask.sum().add(rows);
  }
  const f = (chosen as Tensor).div(rows);
  const P = (probability as Tensor).div(rows);
  return f.mul(P).sum().mul(E);
}
