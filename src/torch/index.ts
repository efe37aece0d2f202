// trinity-rft/torch: a TypeScript tensor library over libtorch (ATen + autograd + optimizers).
//   import * as torch from 'trinity-rft/torch';
//   const w = torch.randn([4, 3], { requiresGrad: true });
//   const loss = torch.scope(() => x.matmul(w).square().mean());
export * from './capture.js';
export * from './creation.js';
export * from './distributed.js';
export * from './device.js';
export * from './dtype.js';
export * from './functional.js';
export * from './lr-schedule.js';
export * from './optim.js';
export * from './profiler.js';
export * from './safetensors.js';
export { keep, scope, scopeSteps } from './scope.js';
export { isDType, Tensor, TensorDisposedError } from './tensor.js';
export type { BlasInfo, SdpBackend, SdpBackendChoice } from './native.js';
export type { ReduceOptions, ToOptions } from './tensor.js';
export * from './worker.js';
