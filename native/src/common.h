// Shared plumbing of the addon: tensor handles, argument conversion, the error boundary.
//
// A tensor crosses into JavaScript as a number: a handle into the calling thread's table of tensors (core.cpp). The
// TypeScript Tensor class owns the handle and frees it with dispose() (directly, from a scope, or from its
// FinalizationRegistry safety net); storage goes when no other handle, view or autograd node uses it. Handles under
// that safety net report their bytes to V8 as external memory (accountMemory) so the GC sees what it would free; a
// scope's tensors do not. Where an operand may be a tensor or a number, a number arrives boxed as [value] (a bare
// number would read as a handle).
#pragma once

// NAPI_EXPERIMENTAL: the few finalizers left (generators, zero-copy buffers) are "basic" ones that run during GC
// instead of waiting for the event loop; they only free memory, as basic finalizers must.
#define NAPI_EXPERIMENTAL
#include <napi.h>
#include <ATen/ATen.h>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

namespace trt {

// Number of handles that still hold a tensor (all threads). Used by leak tests.
extern std::atomic<int64_t> liveHandles;

// ---- tensors ----
const at::Tensor& unwrap(const Napi::Value& value, const char* what = "tensor");
std::optional<at::Tensor> unwrapOptional(const Napi::Value& value);
Napi::Value wrap(Napi::Env env, at::Tensor tensor);
Napi::Value wrapList(Napi::Env env, const std::vector<at::Tensor>& tensors);
Napi::Value wrapPair(Napi::Env env, const std::tuple<at::Tensor, at::Tensor>& pair);
std::vector<at::Tensor> tensorList(const Napi::Value& value);

// ---- plain values ----
// A value as an error message names it: 1.5, 3n, the string "x", undefined, an object.
std::string describe(const Napi::Value& value);
std::vector<int64_t> intList(const Napi::Value& value);
std::optional<std::vector<int64_t>> optionalIntList(const Napi::Value& value);
int64_t toInt(const Napi::Value& value);
double toDouble(const Napi::Value& value);
bool toBool(const Napi::Value& value);
std::optional<double> optionalDouble(const Napi::Value& value);
at::Scalar toScalar(const Napi::Value& value);
std::optional<at::Scalar> optionalScalar(const Napi::Value& value);
at::ScalarType toDtype(const Napi::Value& value);
std::optional<at::ScalarType> optionalDtype(const Napi::Value& value);
c10::Device toDevice(const Napi::Value& value);
std::optional<at::Generator> optionalGenerator(const Napi::Value& value);

// A tensor argument that may also be a boxed number [value]: numbers become "wrapped number" scalar tensors, so type
// promotion follows PyTorch's rules for Python scalars (bf16 tensor * 0.5 stays bf16).
at::Tensor tensorOrScalar(const Napi::Value& value);
// The value inside a boxed scalar operand [value].
Napi::Value boxedScalar(const Napi::Value& value);

inline bool isNullish(const Napi::Value& value) { return value.IsUndefined() || value.IsNull(); }

// ---- the error boundary: every binding runs inside it ----
std::string cleanMessage(const c10::Error& error);
// The message of any exception: a c10::Error's as cleanMessage gives it, else what().
std::string errorMessage(const std::exception& error);

// What a binding does while a capture is open on its thread (capture.h): Records (an op: it records itself),
// Passive (metadata or memory management: allowed, nothing to replay) or Poisons (it reads values back, makes a
// tensor from JavaScript data or has effects outside the recorded ops: the capture is marked not replayable).
enum class DuringCapture { Records, Passive, Poisons };

class Recorder;
Recorder* activeRecorder();
void poisonCapture(Recorder* recorder, const void* binding);
void registerBindingName(const void* binding, const char* name);

// Native calls made by the calling thread (every binding counts one; a replay counts one).
extern thread_local uint64_t nativeCalls;

template <Napi::Value (*Fn)(const Napi::CallbackInfo&), DuringCapture Use = DuringCapture::Poisons>
Napi::Value guarded(const Napi::CallbackInfo& info) {
  ++nativeCalls;
  if constexpr (Use == DuringCapture::Poisons) {
    if (Recorder* recorder = activeRecorder()) poisonCapture(recorder, reinterpret_cast<const void*>(Fn));
  }
  try {
    return Fn(info);
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::exception& error) {
    throw Napi::Error::New(info.Env(), errorMessage(error));
  }
}

#define TRT_EXPORT_AS(exports, jsName, fn, use)                                              \
  do {                                                                                       \
    ::trt::registerBindingName(reinterpret_cast<const void*>(&fn), jsName);                  \
    (exports).Set(jsName, Napi::Function::New<::trt::guarded<fn, use>>((exports).Env(), jsName)); \
  } while (0)
// A binding that poisons an open capture (the default), one that is harmless during one, one that records itself.
#define TRT_EXPORT(exports, jsName, fn) TRT_EXPORT_AS(exports, jsName, fn, ::trt::DuringCapture::Poisons)
#define TRT_EXPORT_PASSIVE(exports, jsName, fn) TRT_EXPORT_AS(exports, jsName, fn, ::trt::DuringCapture::Passive)
#define TRT_EXPORT_RECORDED(exports, jsName, fn) TRT_EXPORT_AS(exports, jsName, fn, ::trt::DuringCapture::Records)

// The text of a string argument.
std::string toText(const Napi::Value& value);

// The op table's products (kernels.cpp): ATen's, except CPU bfloat16 where libtorch's bf16 product is a reference
// loop, which runs in float32 and rounds once.
at::Tensor productLinear(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias);
at::Tensor productMatmul(const at::Tensor& a, const at::Tensor& b);
at::Tensor productMm(const at::Tensor& a, const at::Tensor& b);
at::Tensor productBmm(const at::Tensor& a, const at::Tensor& b);

// Whether libtorch's float32 BLAS is MKL running its AVX-512 code on this CPU (blas.cpp: MKL's vendor check).
bool mklRunsAvx512();

void registerBlas(Napi::Object exports);
void registerCore(Napi::Object exports);
void registerOps(Napi::Object exports);
void registerKernels(Napi::Object exports);
void registerDistributed(Napi::Object exports);
void registerCapture(Napi::Object exports);
void registerProfiler(Napi::Object exports);

}  // namespace trt
