// Loads the native addon (native/build/trinity_torch.node) and types its surface.
// Nothing outside src/torch imports this file: use the Tensor API instead.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/** A handle into the calling thread's tensor table (a number), owned by exactly one Tensor object. */
export type Handle = number & { readonly __brand: 'TensorHandle' };
/** A number operand where a tensor may also stand: boxed, since a bare number is a handle. */
export type BoxedScalar = [number | boolean];
/** An opaque reference to a captured step (native/src/capture.h). */
export type CaptureProgramHandle = { readonly __brand: 'CaptureProgram' };
/**
 * A captured step's CUDA graph: off (not asked for, or refused), pending (recorded at its next replay), ready (replays
 * launch it), failed (recording failed; replays run op by op).
 */
export type CudaGraphState = 'off' | 'pending' | 'ready' | 'failed';
/** An opaque reference to a libtorch random generator. */
export type GeneratorHandle = { readonly __brand: 'GeneratorHandle' };
/** libtorch's attention kernels, as its switches name them (see functional.ts setSdpBackendEnabled). */
export type SdpBackend = 'flash' | 'efficient' | 'math' | 'cudnn';
/** The kernel scaled_dot_product_attention picks: one of those, or a device's own ('overrideable'). */
export type SdpBackendChoice = SdpBackend | 'overrideable';

type H = Handle;
type TS = Handle | BoxedScalar;
type OptH = Handle | null | undefined;
type Dims = number[] | null | undefined;
type Dt = number | null | undefined;
type OptNum = number | null | undefined;
type Gen = GeneratorHandle | null | undefined;

/** The addon's functions; argument order follows native/src/ops.cpp and native/src/core.cpp. */
/** The events of a profile as columns, one entry per event (see native/src/profiler.cpp). */
export interface ProfilerEvents {
  names: string[];
  /** Index into names. */
  name: Int32Array;
  startUs: Float64Array;
  durationUs: Float64Array;
  thread: Float64Array;
  /** 1 = a device activity (a CUDA kernel, a copy), 0 = on the CPU. */
  onDevice: Uint8Array;
}

/** What libtorch's float32 BLAS runs here (see blasInfo). */
export interface BlasInfo {
  /** 'mkl' on libtorch's x86 builds. */
  library: 'mkl' | 'other';
  /**
   * TRINITY_MKL_AVX512: 'auto' (default) answers MKL's vendor check from the CPU's features, so MKL runs its AVX-512
   * code on any x86 CPU with AVX-512 F/CD/BW/DQ/VL (AMD's Zen 4 and Zen 5 too, not only Intel's); 'off' leaves MKL's
   * own answer (Intel or not). Any other value is refused when the addon loads.
   */
  vendorCheck: 'auto' | 'off';
  /** MKL asked this addon's vendor check (false: another definition was found first, or no MKL). */
  asked: boolean;
  /** What it was told (null when it did not ask). */
  answer: boolean | null;
  /** MKL's float32 products run its AVX-512 code (the answer, the CPU's features, MKL_ENABLE_INSTRUCTIONS). */
  avx512: boolean;
  /** MKL's own dispatch code (mkl_serv_cpu_detect, undocumented: e.g. 5 for AVX2, 7 for AVX-512), null without it. */
  dispatch: number | null;
}

export interface NativeAddon {
  // creation
  createGenerator(seed: number | bigint, device: string | null): GeneratorHandle;
  manualSeed(seed: number | bigint): void;
  fromBytes(bytes: ArrayBufferView, dtype: number, shape: number[], device: string | null): H;
  empty(shape: number[], dtype: Dt, device: string | null): H;
  full(shape: number[], value: number | boolean, dtype: Dt, device: string | null): H;
  arange(start: number, end: number, step: number, dtype: Dt, device: string | null): H;
  linspace(start: number, end: number, steps: number, dtype: Dt, device: string | null): H;
  randn(shape: number[], dtype: Dt, device: string | null, gen: Gen): H;
  rand(shape: number[], dtype: Dt, device: string | null, gen: Gen): H;
  randint(low: number, high: number, shape: number[], dtype: Dt, device: string | null, gen: Gen): H;
  uniformPerGenerator(generators: Gen[], device: string | null): H;
  normal_(t: H, mean: number, std: number, gen: Gen): void;
  uniform_(t: H, from: number, to: number, gen: Gen): void;
  // metadata and read-back
  shape(t: H): number[];
  strides(t: H): number[];
  dtype(t: H): number;
  device(t: H): string;
  isContiguous(t: H): boolean;
  version(t: H): number;
  dataPtr(t: H): bigint;
  toBytes(t: H, copy: boolean): ArrayBuffer;
  item(t: H): number | boolean;
  dispose(t: H): void;
  liveHandleCount(): number;
  accountMemory(t: H): void;
  /** Bytes this thread's tensors have reported to V8 as external memory (accountMemory). */
  reportedMemory(): number;
  allocatorTuning(): { applied: boolean; mmapThreshold: number | null; trimThreshold: number | null; reason: string | null };
  // profiler (native/src/profiler.cpp)
  profilerStart(withDevice: boolean): void;
  profilerRangePush(name: string): void;
  profilerRangePop(): void;
  profilerStop(tracePath: string | null): ProfilerEvents;
  // autograd
  setRequiresGrad(t: H, value: boolean): void;
  requiresGrad(t: H): boolean;
  isLeaf(t: H): boolean;
  backward(t: H, gradient: OptH, retainGraph: boolean | null, createGraph: boolean): void;
  grad(t: H): H | null;
  setGrad(t: H, grad: OptH): void;
  retainGrad(t: H): void;
  setGradEnabled(enabled: boolean): boolean;
  isGradEnabled(): boolean;
  gradOf(outputs: H[], inputs: H[], gradOutputs: H[] | null, retainGraph: boolean | null, createGraph: boolean): (H | null)[];
  // optimizers, files, threads
  fusedAdamW(
    params: H[],
    grads: H[],
    expAvgs: H[],
    expAvgSqs: H[],
    steps: H[],
    lr: number,
    beta1: number,
    beta2: number,
    weightDecay: number,
    eps: number,
  ): void;
  clipGradNorm(grads: H[], maxNorm: number, normType: number): H;
  readFileInto(path: string, byteOffset: number, t: H): void;
  setNumThreads(n: number): void;
  getNumThreads(): number;
  cudaDeviceCount(): number;
  buildInfo(): { torchVersion: string; config: string; parallel: string };
  /** Registers a new reference to t under a fresh id (never reused), tagged with owner (0: untagged). */
  exportTensor(t: H, owner: number): bigint;
  /** Takes export `id` out of the registry as a handle of this thread; throws if it is not registered. */
  importTensor(id: bigint): H;
  /** Frees export `id` if it is still registered; returns whether it was. */
  releaseExported(id: bigint): boolean;
  /** Frees every export still registered with this owner tag (> 0); returns how many. */
  releaseExportsOf(owner: number): number;
  /** Exports registered and not yet imported or released (all threads). */
  liveExportCount(): number;
  // elementwise
  add(a: H, b: TS, alpha: OptNum): H;
  sub(a: H, b: TS, alpha: OptNum): H;
  mul(a: H, b: TS): H;
  div(a: H, b: TS): H;
  pow(a: H, b: TS): H;
  minimum(a: H, b: TS): H;
  maximum(a: H, b: TS): H;
  eq(a: H, b: TS): H;
  ne(a: H, b: TS): H;
  lt(a: H, b: TS): H;
  le(a: H, b: TS): H;
  gt(a: H, b: TS): H;
  ge(a: H, b: TS): H;
  logicalAnd(a: H, b: H): H;
  logicalOr(a: H, b: H): H;
  logicalXor(a: H, b: H): H;
  logicalNot(a: H): H;
  clamp(a: H, min: OptNum, max: OptNum): H;
  where(cond: H, a: TS, b: TS): H;
  lerp(a: H, b: H, weight: TS): H;
  neg(a: H): H;
  abs(a: H): H;
  exp(a: H): H;
  log(a: H): H;
  log1p(a: H): H;
  expm1(a: H): H;
  sqrt(a: H): H;
  rsqrt(a: H): H;
  square(a: H): H;
  reciprocal(a: H): H;
  sign(a: H): H;
  sin(a: H): H;
  cos(a: H): H;
  floor(a: H): H;
  ceil(a: H): H;
  round(a: H): H;
  isnan(a: H): H;
  isinf(a: H): H;
  isfinite(a: H): H;
  relu(a: H): H;
  silu(a: H): H;
  gelu(a: H, approximate: string): H;
  tanh(a: H): H;
  sigmoid(a: H): H;
  logsigmoid(a: H): H;
  softplus(a: H, beta: OptNum, threshold: OptNum): H;
  softmax(a: H, dim: number, dtype: Dt): H;
  logSoftmax(a: H, dim: number, dtype: Dt): H;
  dropout(a: H, p: number, train: boolean): H;
  // reductions
  sum(a: H, dims: Dims, keepdim: boolean, dtype: Dt): H;
  mean(a: H, dims: Dims, keepdim: boolean, dtype: Dt): H;
  amax(a: H, dims: Dims, keepdim: boolean): H;
  amin(a: H, dims: Dims, keepdim: boolean): H;
  argmax(a: H, dim: OptNum, keepdim: boolean): H;
  argmin(a: H, dim: OptNum, keepdim: boolean): H;
  logsumexp(a: H, dims: number[], keepdim: boolean): H;
  norm(a: H, p: number, dims: Dims, keepdim: boolean, dtype: Dt): H;
  var(a: H, dims: Dims, correction: OptNum, keepdim: boolean): H;
  all(a: H, dim: OptNum, keepdim: boolean): H;
  any(a: H, dim: OptNum, keepdim: boolean): H;
  cumsum(a: H, dim: number, dtype: Dt): H;
  cumprod(a: H, dim: number, dtype: Dt): H;
  maxDim(a: H, dim: number, keepdim: boolean): [H, H];
  minDim(a: H, dim: number, keepdim: boolean): [H, H];
  topk(a: H, k: number, dim: number, largest: boolean, sorted: boolean): [H, H];
  sort(a: H, dim: number, descending: boolean, stable: boolean): [H, H];
  argsort(a: H, dim: number, descending: boolean, stable: boolean): H;
  // layers
  matmul(a: H, b: H): H;
  mm(a: H, b: H): H;
  bmm(a: H, b: H): H;
  linear(x: H, weight: H, bias: OptH): H;
  packLinear(weight: H): H;
  packedLinear(x: H, packed: H, bias: OptH, outFeatures: number): H;
  packLinear_(weight: H, packed: H): void;
  packedLinearSupported(): boolean;
  decodeAttention(q: H, k: H, v: H, mask: OptH, scale: number): H;
  decodeRmsNorm(x: H, weight: H, eps: number): H;
  decodeRotary(x: H, cos: H, sin: H): H;
  writeCacheRows(buffer: H, slots: H, positions: H, source: H): void;
  cpuHasBf16Matmul(): boolean;
  blasHoldsToAvx2(): boolean;
  blasInfo(): BlasInfo;
  packedLinearIsa(dtype: 'float32' | 'bfloat16'): 'avx512bf16' | 'avx512' | 'avx2' | 'none';
  setPackedLinearIsa(isa: 'auto' | 'avx512' | 'avx2'): void;
  setMkldnnEnabled(enabled: boolean): void;
  mkldnnEnabled(): boolean;
  embedding(weight: H, indices: H): H;
  rmsNorm(x: H, shape: number[], weight: OptH, eps: OptNum): H;
  layerNorm(x: H, shape: number[], weight: OptH, bias: OptH, eps: number): H;
  scaledDotProductAttention(q: H, k: H, v: H, mask: OptH, dropout: number, causal: boolean, scale: OptNum, gqa: boolean): H;
  sdpBackend(q: H, k: H, v: H, mask: OptH, causal: boolean, gqa: boolean): SdpBackendChoice;
  setSdpBackendEnabled(backend: SdpBackend, enabled: boolean): void;
  sdpBackendEnabled(backend: SdpBackend): boolean;
  crossEntropy(logits: H, target: H, ignoreIndex: number, reduction: number, labelSmoothing: number): H;
  einsum(equation: string, operands: H[]): H;
  outer(a: H, b: H): H;
  // indexing
  gather(a: H, dim: number, index: H): H;
  scatter(a: H, dim: number, index: H, src: TS): H;
  scatterAdd(a: H, dim: number, index: H, src: H): H;
  indexSelect(a: H, dim: number, index: H): H;
  maskedFill(a: H, mask: H, value: TS): H;
  maskedSelect(a: H, mask: H): H;
  nonzero(a: H): H;
  tril(a: H, diagonal: number): H;
  triu(a: H, diagonal: number): H;
  multinomial(probs: H, n: number, replacement: boolean, gen: Gen): H;
  index(a: H, indices: (H | null)[]): H;
  // shape
  cat(list: H[], dim: number): H;
  stack(list: H[], dim: number): H;
  reshape(a: H, shape: number[]): H;
  view(a: H, shape: number[]): H;
  transpose(a: H, d0: number, d1: number): H;
  permute(a: H, dims: number[]): H;
  contiguous(a: H): H;
  unsqueeze(a: H, dim: number): H;
  squeeze(a: H, dims: Dims): H;
  expand(a: H, shape: number[]): H;
  narrow(a: H, dim: number, start: number, length: number): H;
  slice(a: H, dim: number, start: OptNum, end: OptNum, step: number): H;
  select(a: H, dim: number, index: number): H;
  flatten(a: H, startDim: number, endDim: number): H;
  repeat(a: H, repeats: number[]): H;
  repeatInterleave(a: H, repeats: number, dim: number): H;
  flip(a: H, dims: number[]): H;
  roll(a: H, shifts: number[], dims: number[]): H;
  pad(a: H, padding: number[], value: number): H;
  split(a: H, sizeOrSizes: number | number[], dim: number): H[];
  chunk(a: H, chunks: number, dim: number): H[];
  unbind(a: H, dim: number): H[];
  // conversion
  to(a: H, dtype: Dt, device: string | null, nonBlocking: boolean, copy: boolean): H;
  clone(a: H): H;
  detach(a: H): H;
  alias(a: H): H;
  emptyLike(a: H): H;
  zerosLike(a: H): H;
  onesLike(a: H): H;
  fullLike(a: H, value: number | boolean): H;
  // in place
  copy_(a: H, src: H): void;
  add_(a: H, b: TS, alpha: OptNum): void;
  sub_(a: H, b: TS, alpha: OptNum): void;
  mul_(a: H, b: TS): void;
  div_(a: H, b: TS): void;
  zero_(a: H): void;
  fill_(a: H, value: number | boolean): void;
  clamp_(a: H, min: OptNum, max: OptNum): void;
  maskedFill_(a: H, mask: H, value: number | boolean): void;
  indexCopy_(a: H, dim: number, index: H, src: H): void;
  indexPut_(a: H, indices: (H | null)[], values: H, accumulate: boolean): void;
  addcmul_(a: H, t1: H, t2: H, value: number): void;
  lerp_(a: H, end: H, weight: TS): void;
  // capture and replay (native/src/capture.h): one capture open per thread at a time
  captureBegin(inputs: H[]): void;
  captureEnd(
    outputs: H[],
    cudaGraph?: boolean,
  ): {
    step: CaptureProgramHandle | null;
    reason: string | null;
    ops: number;
    constants?: number;
    graph?: CudaGraphState;
    graphReason?: string | null;
  };
  /** Where a captured step stands with its CUDA graph (see CapturedStep.graph). */
  captureGraphState(step: CaptureProgramHandle): { graph: CudaGraphState; graphReason: string | null };
  captureAbort(): void;
  replayCapture(step: CaptureProgramHandle, inputs: H[]): H[];
  releaseCapture(step: CaptureProgramHandle): void;
  /** Native calls made so far by the calling thread (a replay counts one). */
  nativeCallCount(): number;
  // distributed (native/src/distributed.cpp): stores and groups are ids in process-wide registries; each call that
  // waits for other ranks returns a promise settled off the JS thread
  distBackends(): { gloo: boolean; nccl: boolean };
  distStoreCreate(
    host: string,
    port: number,
    worldSize: number,
    isMaster: boolean,
    timeoutMs: number,
  ): Promise<{ id: number; port: number }>;
  distStoreSet(store: number, key: string, value: Uint8Array): Promise<void>;
  distStoreGet(store: number, key: string, timeoutMs: number): Promise<Uint8Array>;
  distStoreAdd(store: number, key: string, delta: number): Promise<number>;
  distStoreFree(store: number): Promise<void>;
  distGroupCreate(
    store: number,
    rank: number,
    worldSize: number,
    backend: string,
    timeoutMs: number,
    interfaces: string[],
    checkCollectives: boolean,
  ): Promise<number>;
  distGroupDestroy(group: number): Promise<void>;
  distAllReduce(group: number, tensors: H[], op: string, timeoutMs: number, coalesced: boolean): Promise<void>;
  distBroadcast(group: number, tensors: H[], root: number, timeoutMs: number): Promise<void>;
  distAllGather(group: number, tensor: H, timeoutMs: number): Promise<H[]>;
  distReduceScatter(group: number, input: H, op: string, timeoutMs: number): Promise<H>;
  distBarrier(group: number, timeoutMs: number): Promise<void>;
  distGradBucketsCreate(
    group: number,
    params: H[],
    targets: H[] | null,
    buckets: number[][],
    hooked: boolean[],
    op: string,
    timeoutMs: number,
  ): number;
  distGradBucketsArm(id: number): void;
  distGradBucketsFinish(id: number): Promise<number>;
  distGradBucketsFree(id: number): void;
}

const here = dirname(fileURLToPath(import.meta.url));
const addonPath = resolve(here, '..', '..', 'native', 'build', 'trinity_torch.node');

/** What builds the addon: the setup script in a checkout; npm's install script where the package was installed. */
function howToBuild(): string {
  if (!addonPath.includes(`${sep}node_modules${sep}`))
    return 'Run `bash scripts/setup.sh` (or `npm run setup`) in the trinity-rft folder: it finds or installs libtorch and builds the addon.';
  return (
    'Its build at install failed or did not run (npm install --ignore-scripts, or an allowScripts in your package.json ' +
    'that does not approve trinity-rft: `npm install-scripts approve trinity-rft`). Run `npm rebuild trinity-rft` in ' +
    'your project: it finds or installs libtorch and builds the addon (scripts/setup.sh); or, to reuse an addon built ' +
    'from the same trinity-rft version, `TRINITY_NATIVE_ADDON=/path/to/trinity_torch.node npm rebuild trinity-rft`.'
  );
}

function loadAddon(): NativeAddon {
  if (!existsSync(addonPath)) throw new Error(`The native addon is not built (${addonPath} is missing). ${howToBuild()}`);
  const require = createRequire(import.meta.url);
  return require(addonPath) as NativeAddon;
}

export const native: NativeAddon = loadAddon();
export const nativeAddonPath = join(addonPath);
