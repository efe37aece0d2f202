// A worker module for transformer.test.ts: load a model and run a forward (with its KV cache) on a worker thread.
import { CausalLM } from '../../../src/model/index.js';
import * as torch from '../../../src/torch/index.js';

torch.serveTensorWorker({
  forward(dir: string, ids: torch.Tensor, mask: torch.Tensor) {
    const model = CausalLM.load(dir);
    try {
      const logits = torch.noGrad(() => model.forward(ids, { attentionMask: mask }));
      // and a cached decode step, so the cache's in-place writes run on this thread too
      const cache = model.createKVCache({ slots: ids.size(0), maxLength: ids.size(1) + 1 });
      torch.scope(() => {
        model.forward(ids, { attentionMask: mask, cache });
        model.forward(ids.narrow(1, 0, 1), { cache });
      });
      cache.dispose();
      return logits;
    } finally {
      model.dispose();
      ids.dispose();
      mask.dispose();
    }
  },
});
