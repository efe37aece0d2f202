// The FrozenLake example on several seeds (README.md's table): a new model and a fresh run of config.yaml per seed,
// then the held-out success rate after SFT and after GRPO, greedy and sampled (../seeds.ts).
//   node --import tsx examples/frozen_lake/run-seeds.ts [--seeds 0,1,2] [--set key=value]...
// Runs go to runs/frozen_lake/seed<N> (model) and runs/frozen_lake/grid-seed<N> (job), both replaced.
import { runSeeds } from '../seeds.js';

runSeeds({
  example: 'frozen_lake',
  job: 'grid',
  modelInit: ['--layers', '4', '--max-positions', '512'],
  title: 'FrozenLake 4x4, success rate on 100 held-out maps',
  sampledMetric: 'eval/eval_sampled/mean@4',
});
