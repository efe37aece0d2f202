// The router's load-balancing loss of a mixture-of-experts policy (../../model/moe.ts) in a train step. SFT adds it
// to each micro-batch's loss as transformers does with output_router_logits:
//   loss += router_aux_loss_coef (the model's config.json) * aux * (micro-batch rows / batch rows)
// Every other algorithm only logs it (metric router_aux_loss, the row-weighted mean over the step's micro-batches):
// an RL objective is the algorithm's own. Dense models have none.
import type { ModelConfig } from '../../model/config.js';
import type { AlgorithmSchema } from '../algorithm/presets.js';

export const ROUTER_AUX_LOSS_METRIC = 'router_aux_loss';

/**
 * forwardBackward's routerAuxLoss for a micro-batch holding `rowShare` of the batch's rows: the weight of the
 * load-balancing loss in its loss (0: computed for the metric only), or undefined for a dense model.
 */
export function routerAuxLossWeight(config: ModelConfig, schema: AlgorithmSchema, rowShare: number): number | undefined {
  if (config.moe === null) return undefined;
  return schema === 'sft' ? config.moe.routerAuxLossCoef * rowShare : 0;
}
