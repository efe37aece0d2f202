// Module entry point. The addon is context-aware (Node-API), so every worker thread can load it.
#include "common.h"

static Napi::Object init(Napi::Env env, Napi::Object exports) {
  trt::registerCore(env, exports);
  trt::registerOps(env, exports);
  trt::registerKernels(env, exports);
  return exports;
}

NODE_API_MODULE(trinity_torch, init)
