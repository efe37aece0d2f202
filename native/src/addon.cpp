// Module entry point. The addon is context-aware (Node-API), so every worker thread can load it.
#include "common.h"

static Napi::Object init(Napi::Env, Napi::Object exports) {
  trt::registerBlas(exports);  // first: it refuses a bad TRINITY_MKL_AVX512 before anything runs
  trt::registerCore(exports);
  trt::registerOps(exports);
  trt::registerKernels(exports);
  trt::registerDistributed(exports);
  trt::registerCapture(exports);
  trt::registerProfiler(exports);
  return exports;
}

NODE_API_MODULE(trinity_torch, init)
