// A child process for fsdp-load.test.ts: the peak resident memory (process.resourceUsage().maxRSS) that starting from
// model folder argv[3] adds, after the same start from the tiny folder argv[4], by argv[2]: 'sharded' builds rank 0 of 8 from the folder's ranges (weightless model,
// FullyShardedModel over folderSource), 'whole' loads the model whole (CausalLM.load, as every rank did before).
// Prints one JSON line: { peakBytes, shardBytes }.
import { CausalLM } from '../../../../src/model/index.js';
import { FullyShardedModel } from '../../../../src/rft/trainer/fsdp.js';
import { folderSource, weightlessModel } from '../../../../src/rft/trainer/fsdp-load.js';
import { CheckpointReads } from '../../../../src/rft/trainer/fsdp-resume.js';

const [mode, dir, warmUpDir] = process.argv.slice(2) as ['sharded' | 'whole', string, string];

/** The start `mode` from `folder`; the bytes of rank 0's shards ('sharded'). */
function start(folder: string): number {
  if (mode === 'whole') {
    CausalLM.load(folder, { dtype: 'float32' }).dispose();
    return 0;
  }
  const model = weightlessModel(folder, { dtype: 'float32', device: 'cpu' });
  const source = folderSource(folder, model, { dtype: 'float32', device: 'cpu' }, new CheckpointReads());
  const sharded = new FullyShardedModel(model, source, { rank: 0, worldSize: 8, computeDtype: 'float32' });
  const bytes = sharded.stateBytes().parameters;
  sharded.dispose();
  model.dispose();
  return bytes;
}

start(warmUpDir); // the same start from a tiny folder first: libtorch's and the modules' own pages, before the baseline
const peak = () => process.resourceUsage().maxRSS * 1024;
const before = peak();
const shardBytes = start(dir);
console.log(JSON.stringify({ peakBytes: peak() - before, shardBytes }));
