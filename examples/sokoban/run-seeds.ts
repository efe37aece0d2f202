// The Sokoban example on several seeds (README.md's table): a new model and a fresh run of config.yaml per seed,
// then the held-out success rate after SFT and after GRPO, greedy and sampled (../seeds.ts).
//   node --import tsx examples/sokoban/run-seeds.ts [--seeds 0,1,2] [--set key=value]...
// Runs go to runs/sokoban/seed<N> (model) and runs/sokoban/boxes-seed<N> (job), both replaced.
import { runSeeds } from '../seeds.js';

runSeeds({
  example: 'sokoban',
  job: 'boxes',
  modelInit: ['--layers', '4', '--max-positions', '1024'],
  title: 'Sokoban 6x6, success rate on 100 held-out levels',
  sampledMetric: 'eval/eval_sampled/mean@4',
});
