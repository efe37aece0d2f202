// `mask_response_truncated` (Trinity-RFT's MaskResponseTruncatedOperator; DAPO, arXiv:2503.14476, §3.4 "overlong
// filtering"): a response cut off at the length limit (truncateStatus 'response_truncated', the engine stopped on
// max_tokens) is kept, with its reward in the group statistics, but trains nothing:
//
//   actionMask[t] = 0 for every response token t of a truncated response
import { responseLength } from '../../../experience.js';
import { registerExperienceOperator } from '../registry.js';
import type { ExperienceOperatorModule } from '../types.js';

export type MaskResponseTruncatedOptions = Record<string, never>;

export const maskResponseTruncated: ExperienceOperatorModule<MaskResponseTruncatedOptions> = {
  description: 'keeps responses cut off at the length limit out of the loss (their action mask set to 0)',
  defaults: {},
  create: () => ({
    process: (experiences) => {
      let masked = 0;
      const out = experiences.map((e) => {
        if (e.truncateStatus !== 'response_truncated') return e;
        masked++;
        return { ...e, actionMask: new Array<number>(responseLength(e)).fill(0) };
      });
      return { experiences: out, metrics: { masked_truncated_count: masked } };
    },
  }),
};

registerExperienceOperator('mask_response_truncated', maskResponseTruncated);
