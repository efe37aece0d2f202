// Held-out accuracy of a visual_count model: the share of rows whose greedy answer is the right count. A row's prompt
// is laid out as training lays it out (loadSftDataset with format.image_key: the chat template, each image's
// placeholder tokens); the answer is one digit, so the greedy answer is the argmax of the next-token logits after the
// prompt. Runs the model directly (Qwen2_5VLModel.forward), so it needs no rollout engine.
// Usage: node --import tsx examples/visual_count/evaluate.ts MODEL_DIR DATA_DIR/heldout.jsonl
import { decodeImage, loadImageProcessorConfig, preprocessImages, Qwen2_5VLModel } from 'trinity-rft/model';
import { loadSftDataset } from 'trinity-rft/rft';
import { Tokenizer } from 'trinity-rft/tokenizer';
import * as torch from 'trinity-rft/torch';

/** Greedy accuracy of the model folder on the rows of `jsonl` ({prompt, response, image}), in batches of `batch`. */
export async function heldoutAccuracy(modelDir: string, jsonl: string, batch = 64): Promise<number> {
  const rows = await loadSftDataset(jsonl, Tokenizer.load(modelDir), { imageKey: 'image', modelDir });
  const processor = loadImageProcessorConfig(modelDir);
  const model = Qwen2_5VLModel.load(modelDir);
  let right = 0;
  try {
    for (let start = 0; start < rows.length; start += batch) {
      const part = rows.slice(start, start + batch);
      const decoded = await Promise.all(part.flatMap((e) => (e.images ?? []).map((url) => decodeImage(url, e.eid))));
      right += torch.scope(() =>
        torch.noGrad(() => {
          const prompts = part.map((e) => e.tokens.slice(0, e.promptLength));
          const width = Math.max(...prompts.map((p) => p.length));
          // left-padded prompts: the last column is every row's next-token position
          const ids = torch.tensor(prompts.map((p) => [...Array(width - p.length).fill(0n), ...p.map(BigInt)]));
          const mask = torch.tensor(prompts.map((p) => [...Array(width - p.length).fill(0n), ...p.map(() => 1n)]));
          const images = preprocessImages(decoded, processor);
          const logits = model.forward(ids, { attentionMask: mask, images });
          const predicted = logits
            .select(1, width - 1)
            .argmax(-1)
            .toArray() as number[];
          return part.filter((e, i) => predicted[i] === e.tokens[e.promptLength]).length;
        }),
      );
    }
  } finally {
    model.dispose();
  }
  return right / rows.length;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [modelDir, jsonl] = process.argv.slice(2);
  if (!modelDir || !jsonl) throw new Error('usage: evaluate.ts MODEL_DIR HELDOUT_JSONL');
  console.log(`held-out accuracy: ${(await heldoutAccuracy(modelDir, jsonl)).toFixed(3)}`);
}
