// The trainer's intra-op thread count under trainer.bitwise_on_policy, set again before each step.
//
// libtorch's thread count (at::set_num_threads: OpenMP's and MKL's) behaves as one setting for the whole process, not
// one per worker thread: the rollout engines' workers set theirs when they start (floor(explorer threads /
// engine_num) each), and the trainer's worker then computes with whichever count was set last (its step saw 2 threads
// with engine_num 1 and 1 with engine_num 2). Two ops of the step give other bits at another count
// (bench/thread-count-bits.bench.ts; figures in bench/README.md): the masked softmax's backward inside the attention's
// gradient (so dq and dk: the q_proj and k_proj weights were the ones that differed), and the weight gradient's
// product dW = dY^T X once a micro-batch has ~1K tokens (BLAS splits the sum over tokens among its threads). The
// forward, the input gradients and dv do not depend on it. Set back to the trainer's own count (the stage's trainer
// threads: OMP_NUM_THREADS or the cores, halved when explorer and trainer overlap) before each step, the update depends
// on that count alone: runs repeat bit for bit on the same thread count, whatever engine_num; another count (another
// machine, another OMP_NUM_THREADS) gives another run. The engines' own results do not depend on it (the fixed-order
// kernels give the same bits on any count).
import * as torch from '../../torch/index.js';

/** Sets the trainer's thread count again (bitwise runs with a known count); see the header. */
export function pinTrainerThreads(init: { bitwiseOnPolicy?: boolean; numThreads?: number }): void {
  if (init.bitwiseOnPolicy && init.numThreads !== undefined) torch.setNumThreads(init.numThreads);
}
