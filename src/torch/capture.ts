// Capture and replay: a step of tensor ops recorded once and replayed from C++ in one native call.
//
//   const ids = torch.tensor(...);                      // what changes from step to step: the inputs
//   const { outputs, step } = torch.capture([ids], () => [model.forward(ids, ...)]);   // runs eagerly, records
//   const [logits] = step.replay([nextIds]);            // the same ops over new inputs: one native call
//
// The step is still written in TypeScript: capture records what its ops did (native/src/capture.h). A replay is
// exact — bit-identical to running the step again eagerly — under one contract: the step's JavaScript must do the
// same thing for every input it will be replayed with. Its control flow and the numbers it passes to ops may depend
// on the inputs' shapes (a replay checks them) but not on their values, and tensors from outside the step (weights,
// caches) are used by reference, so in-place writes to them happen again at each replay. A step that reads values
// back or makes tensors from JavaScript data (item, toArray, tensor(data), backward, ...) still runs, but capture
// returns no replayable step and says which call was the reason.
//
// On a CUDA device, `capture(inputs, fn, { cudaGraph: true })` also records the step as a CUDA graph at its first
// replay (native/src/cuda_graph.cpp): later replays copy the inputs into the graph's static inputs and launch it, one
// launch instead of one per op, and return copies of its outputs. An op that cannot run inside a graph leaves the
// step replaying op by op; `step.graph` says which happened and why.
import { type CaptureProgramHandle, type CudaGraphState, native } from './native.js';
import { fromHandle, type Tensor } from './tensor.js';

/** What capture() returns: the step's outputs (computed eagerly), and the step to replay or why there is none. */
export interface CaptureResult {
  outputs: Tensor[];
  step: CapturedStep | null;
  /** Why the step cannot be replayed (null when it can). */
  reason: string | null;
  /** Native ops recorded. */
  ops: number;
}

export interface CaptureOptions {
  /**
   * Record the step as a CUDA graph at its first replay (every input on one CUDA device; the step captured without
   * gradients). Default false.
   */
  cudaGraph?: boolean;
}

/** Where a captured step stands with its CUDA graph. */
export interface CudaGraphStatus {
  state: CudaGraphState;
  /** Why it is off (refused) or failed; null otherwise. */
  reason: string | null;
}

/** A captured step (see capture()). Replays on the thread that captured it. */
export class CapturedStep {
  readonly #program: CaptureProgramHandle;
  readonly #inputs: number;
  #disposed = false;
  /** Native ops one replay runs. */
  readonly ops: number;

  /** @internal made by capture() */
  constructor(program: CaptureProgramHandle, inputs: number, ops: number) {
    this.#program = program;
    this.#inputs = inputs;
    this.ops = ops;
  }

  /** Runs the recorded ops over `inputs` (same count, shapes, strides, dtypes and devices as when captured). */
  replay(inputs: readonly Tensor[]): Tensor[] {
    if (this.#disposed) throw new Error('replay: the captured step was disposed');
    if (inputs.length !== this.#inputs) {
      throw new RangeError(`replay: ${inputs.length} inputs, the step was captured with ${this.#inputs}`);
    }
    return native
      .replayCapture(
        this.#program,
        inputs.map((t) => t.handle),
      )
      .map(fromHandle);
  }

  /** Its CUDA graph: 'off' unless captured with cudaGraph; 'pending' until the first replay records it. */
  get graph(): CudaGraphStatus {
    if (this.#disposed) throw new Error('graph: the captured step was disposed');
    const { graph, graphReason } = native.captureGraphState(this.#program);
    return { state: graph, reason: graphReason };
  }

  /** Frees the record and its references to outside tensors now (otherwise when it is garbage-collected). */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    native.releaseCapture(this.#program);
  }

  get isDisposed(): boolean {
    return this.#disposed;
  }
}

/**
 * Runs `fn` eagerly while recording its ops; `inputs` are the tensors a replay binds anew (distinct tensors). Returns
 * fn's outputs and, when the step can be replayed, the captured step. If fn throws, nothing is kept and the error
 * propagates. Captures do not nest. With `cudaGraph`, every input must be on a CUDA device.
 */
export function capture(inputs: readonly Tensor[], fn: () => Tensor[], options: CaptureOptions = {}): CaptureResult {
  const cudaGraph = options.cudaGraph ?? false;
  if (cudaGraph) {
    inputs.forEach((t, i) => {
      if (!t.device.startsWith('cuda'))
        throw new RangeError(`capture: cudaGraph needs every input on a CUDA device; input ${i} is on ${t.device}`);
    });
  }
  native.captureBegin(inputs.map((t) => t.handle));
  let outputs: Tensor[];
  try {
    outputs = fn();
    if ((outputs as unknown) instanceof Promise) {
      throw new TypeError('capture(inputs, fn): fn returned a Promise; a captured step must be synchronous');
    }
  } catch (error) {
    native.captureAbort();
    throw error;
  }
  const result = native.captureEnd(
    outputs.map((t) => t.handle),
    cudaGraph,
  );
  return {
    outputs,
    step: result.step === null ? null : new CapturedStep(result.step, inputs.length, result.ops),
    reason: result.reason,
    ops: result.ops,
  };
}

/** Native calls the calling thread has made so far (each tensor op is one; a replay is one). */
export function nativeCallCount(): number {
  return native.nativeCallCount();
}
