// Handles, conversions, creation, metadata, read-back, autograd, optimizers, file I/O, threads.
#include "capture.h"

#include <ATen/ScalarOps.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/InferenceMode.h>
#include <torch/headeronly/version.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <mutex>
#include <unistd.h>
#include <unordered_map>
#include <utility>

namespace trt {

std::atomic<int64_t> liveHandles{0};

// ---------------------------------------------------------------------------------------------------------------
// handles

// Bytes this thread's handles have reported to V8 (accountMemory), for tests.
static thread_local int64_t reportedBytes = 0;

static void adjustExternal(Napi::BasicEnv env, int64_t delta) {
  if (delta == 0) return;
  Napi::MemoryManagement::AdjustExternalMemory(env, delta);
  reportedBytes += delta;
}

// The handle table of the calling JS thread (main or worker; each runs on its own OS thread). A handle is the
// JS number slot + generation * 2^24: a stale number (its slot freed, maybe reused) fails the generation check.
// No V8 object and no GC finalizer per tensor: creating one costs a vector slot, and a synchronous training loop
// leaves nothing behind for the event loop to clean up.
namespace {
constexpr uint64_t kSlotBits = 24;
constexpr uint64_t kSlotMask = (uint64_t{1} << kSlotBits) - 1;
constexpr uint64_t kGenerationLimit = uint64_t{1} << 28;  // keeps handles below 2^52, exact as JS numbers

struct Entry {
  at::Tensor tensor;
  uint32_t generation = 0;
  int64_t accountedBytes = 0;
};

struct HandleTable {
  std::vector<Entry> entries;
  std::vector<uint32_t> freeSlots;
  ~HandleTable() {
    for (auto& e : entries)
      if (e.tensor.defined()) liveHandles.fetch_sub(1, std::memory_order_relaxed);
  }
};

thread_local HandleTable table;

// A handle is an integer in [0, 2^52) (exact as a JS number). Anything else (a fraction, a negative, NaN, Infinity,
// a number past 2^52) was never a handle: it is rejected before any conversion to an integer type, so a bad number
// can never turn into an out-of-range cast or a slot of the table.
constexpr double kHandleLimit = static_cast<double>(uint64_t{1} << (kSlotBits + 28));
static_assert(kGenerationLimit << kSlotBits == uint64_t{1} << (kSlotBits + 28));

std::optional<uint64_t> handleValue(const Napi::Value& value) {
  double number = value.As<Napi::Number>().DoubleValue();
  if (!(number >= 0 && number < kHandleLimit) || number != std::trunc(number)) return std::nullopt;
  return static_cast<uint64_t>(number);
}

[[noreturn]] void throwMalformedHandle(const Napi::Value& value) {
  throw Napi::TypeError::New(value.Env(), "invalid tensor handle " + value.ToString().Utf8Value() +
                                              ": a handle is an integer the addon returned");
}

// The live entry of a well-formed handle, or nullptr when its slot was freed (maybe reused) or belongs to another
// thread's table.
Entry* lookup(uint64_t handle) {
  uint64_t slot = handle & kSlotMask;
  if (slot >= table.entries.size()) return nullptr;
  Entry& e = table.entries[slot];
  if (e.generation != (handle >> kSlotBits) || !e.tensor.defined()) return nullptr;
  return &e;
}
}  // namespace

Napi::Value wrap(Napi::Env env, at::Tensor tensor) {
  if (!tensor.defined()) return env.Null();
  uint32_t slot;
  if (!table.freeSlots.empty()) {
    slot = table.freeSlots.back();
    table.freeSlots.pop_back();
  } else {
    if (table.entries.size() > kSlotMask) throw Napi::Error::New(env, "too many live tensors on this thread (16M): dispose some");
    slot = static_cast<uint32_t>(table.entries.size());
    table.entries.emplace_back();
  }
  Entry& e = table.entries[slot];
  e.tensor = std::move(tensor);
  e.accountedBytes = 0;  // reported to V8 only once the GC can free it: accountMemory()
  liveHandles.fetch_add(1, std::memory_order_relaxed);
  return Napi::Number::New(env, static_cast<double>(slot + (static_cast<uint64_t>(e.generation) << kSlotBits)));
}

const at::Tensor& unwrap(const Napi::Value& value, const char* what) {
  if (!value.IsNumber())
    throw Napi::TypeError::New(value.Env(), std::string("expected a ") + what + " handle, got " + describe(value));
  std::optional<uint64_t> handle = handleValue(value);
  if (!handle) throwMalformedHandle(value);
  Entry* e = lookup(*handle);
  if (e == nullptr)
    throw Napi::Error::New(value.Env(), "tensor handle " + std::to_string(*handle) +
                                            " was disposed (or belongs to another thread)");
  return e->tensor;
}

// The live entry of a handle argument, or nullptr when it was freed (a value that is no handle at all is an error).
static Entry* liveEntry(Napi::Env env, const Napi::Value& value) {
  if (!value.IsNumber()) throw Napi::TypeError::New(env, "expected a tensor handle, got " + describe(value));
  std::optional<uint64_t> handle = handleValue(value);
  if (!handle) throwMalformedHandle(value);
  return lookup(*handle);
}

// Frees a handle's slot; a second call with the same handle is a no-op (the generation moved on).
static void release(Napi::Env env, const Napi::Value& value) {
  Entry* e = liveEntry(env, value);
  if (e == nullptr) return;
  e->tensor.reset();
  adjustExternal(env, -e->accountedBytes);
  e->accountedBytes = 0;
  e->generation = static_cast<uint32_t>((e->generation + 1) % kGenerationLimit);
  table.freeSlots.push_back(static_cast<uint32_t>(e - table.entries.data()));
  liveHandles.fetch_sub(1, std::memory_order_relaxed);
}

std::optional<at::Tensor> unwrapOptional(const Napi::Value& value) {
  if (isNullish(value)) return std::nullopt;
  return unwrap(value);
}

Napi::Value wrapList(Napi::Env env, const std::vector<at::Tensor>& tensors) {
  Napi::Array out = Napi::Array::New(env, tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) out.Set(static_cast<uint32_t>(i), wrap(env, tensors[i]));
  return out;
}

Napi::Value wrapPair(Napi::Env env, const std::tuple<at::Tensor, at::Tensor>& pair) {
  return wrapList(env, {std::get<0>(pair), std::get<1>(pair)});
}

std::vector<at::Tensor> tensorList(const Napi::Value& value) {
  if (!value.IsArray()) throw Napi::TypeError::New(value.Env(), "expected an array of tensors");
  Napi::Array array = value.As<Napi::Array>();
  std::vector<at::Tensor> out;
  out.reserve(array.Length());
  for (uint32_t i = 0; i < array.Length(); ++i) out.push_back(unwrap(array.Get(i)));
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// plain values

std::string describe(const Napi::Value& value) {
  switch (value.Type()) {
    case napi_undefined: return "undefined";
    case napi_null: return "null";
    case napi_boolean: return value.ToBoolean().Value() ? "true" : "false";
    case napi_number: return value.ToString().Utf8Value();
    case napi_bigint: return value.ToString().Utf8Value() + "n";
    case napi_string: return "the string \"" + value.As<Napi::String>().Utf8Value() + "\"";
    case napi_symbol: return "a symbol";
    case napi_function: return "a function";
    case napi_external: return "an external";
    case napi_object: return value.IsArray() ? "an array" : "an object";
  }
  return "a value";
}

int64_t toInt(const Napi::Value& value) {
  if (value.IsNumber()) {
    double number = value.As<Napi::Number>().DoubleValue();
    // [-2^63, 2^63) holds exactly the doubles that convert to int64_t; NaN fails the comparison
    if (!(number >= -0x1p63 && number < 0x1p63) || number != std::trunc(number))
      throw Napi::TypeError::New(value.Env(), "expected an integer, got " + describe(value));
    return static_cast<int64_t>(number);
  }
  if (value.IsBigInt()) {
    bool lossless = false;
    int64_t integer = value.As<Napi::BigInt>().Int64Value(&lossless);
    if (!lossless) throw Napi::RangeError::New(value.Env(), "integer " + describe(value) + " does not fit in 64 bits");
    return integer;
  }
  throw Napi::TypeError::New(value.Env(), "expected an integer, got " + describe(value));
}

double toDouble(const Napi::Value& value) {
  if (!value.IsNumber()) throw Napi::TypeError::New(value.Env(), "expected a number");
  return value.As<Napi::Number>().DoubleValue();
}

bool toBool(const Napi::Value& value) { return value.ToBoolean().Value(); }

std::optional<double> optionalDouble(const Napi::Value& value) {
  if (isNullish(value)) return std::nullopt;
  return toDouble(value);
}

std::vector<int64_t> intList(const Napi::Value& value) {
  if (value.IsNumber()) return {toInt(value)};
  if (!value.IsArray()) throw Napi::TypeError::New(value.Env(), "expected an array of integers");
  Napi::Array array = value.As<Napi::Array>();
  std::vector<int64_t> out(array.Length());
  for (uint32_t i = 0; i < array.Length(); ++i) out[i] = toInt(array.Get(i));
  return out;
}

std::optional<std::vector<int64_t>> optionalIntList(const Napi::Value& value) {
  if (isNullish(value)) return std::nullopt;
  return intList(value);
}

at::Scalar toScalar(const Napi::Value& value) {
  if (value.IsBoolean()) return at::Scalar(value.As<Napi::Boolean>().Value());
  if (value.IsBigInt()) return at::Scalar(toInt(value));
  if (value.IsNumber()) {
    double d = value.As<Napi::Number>().DoubleValue();
    // Integral JS numbers become integer scalars, as Python ints do (int tensor + 1 stays int).
    if (std::isfinite(d) && d == std::trunc(d) && std::abs(d) < 9.007199254740992e15) return at::Scalar(static_cast<int64_t>(d));
    return at::Scalar(d);
  }
  throw Napi::TypeError::New(value.Env(), "expected a number or boolean");
}

std::optional<at::Scalar> optionalScalar(const Napi::Value& value) {
  if (isNullish(value)) return std::nullopt;
  return toScalar(value);
}

at::ScalarType toDtype(const Napi::Value& value) {
  int64_t code = toInt(value);
  switch (code) {
    case 0: case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 11: case 15:
      return static_cast<at::ScalarType>(code);
    default:
      throw Napi::TypeError::New(value.Env(), "unsupported dtype code " + std::to_string(code));
  }
}

std::optional<at::ScalarType> optionalDtype(const Napi::Value& value) {
  if (isNullish(value)) return std::nullopt;
  return toDtype(value);
}

c10::Device toDevice(const Napi::Value& value) {
  if (isNullish(value)) return c10::Device(c10::kCPU);
  if (!value.IsString()) throw Napi::TypeError::New(value.Env(), "expected a device string such as 'cpu' or 'cuda:0'");
  return c10::Device(value.As<Napi::String>().Utf8Value());
}

Napi::Value boxedScalar(const Napi::Value& value) {
  Napi::Array box = value.As<Napi::Array>();
  if (box.Length() != 1) throw Napi::TypeError::New(value.Env(), "a scalar operand is passed as [value]");
  return box.Get(uint32_t{0});
}

at::Tensor tensorOrScalar(const Napi::Value& value) {
  if (!value.IsArray()) return unwrap(value);
  at::Tensor t = c10::scalar_to_tensor(toScalar(boxedScalar(value)));
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

std::string cleanMessage(const c10::Error& error) {
  std::string message = error.what_without_backtrace();
  // libtorch appends "Exception raised from ..." lines in some builds; keep the first paragraph that matters.
  auto pos = message.find("\nException raised from");
  if (pos != std::string::npos) message.resize(pos);
  // Dispatcher errors list every registered backend after a blank line: keep the sentence that explains.
  pos = message.find("\n\n");
  if (pos != std::string::npos && message.find("registered at", pos) != std::string::npos) message.resize(pos);
  return message;
}

std::string errorMessage(const std::exception& error) {
  if (const auto* c10error = dynamic_cast<const c10::Error*>(&error)) return cleanMessage(*c10error);
  return error.what();
}

// ---------------------------------------------------------------------------------------------------------------
// generators

struct GeneratorHolder {
  at::Generator generator;
};

// Marks the externals createGenerator makes, so that no other external (from another addon, say) is ever read as a
// GeneratorHolder.
constexpr napi_type_tag kGeneratorTag = {0x7472742d67656e65ULL, 0x7261746f722d7631ULL};

std::optional<at::Generator> optionalGenerator(const Napi::Value& value) {
  if (isNullish(value)) return std::nullopt;
  if (!value.IsExternal() || !value.As<Napi::External<GeneratorHolder>>().CheckTypeTag(&kGeneratorTag))
    throw Napi::TypeError::New(value.Env(), "expected a generator (from createGenerator), got " + describe(value));
  return value.As<Napi::External<GeneratorHolder>>().Data()->generator;
}

static Napi::Value createGenerator(const Napi::CallbackInfo& info) {
  c10::Device device = toDevice(info[1]);
  at::Generator generator;
  if (device.is_cpu()) {
    generator = at::detail::createCPUGenerator(static_cast<uint64_t>(toInt(info[0])));
  } else {
    generator = at::globalContext().defaultGenerator(device).clone();
    generator.set_current_seed(static_cast<uint64_t>(toInt(info[0])));
  }
  auto external = Napi::External<GeneratorHolder>::New(info.Env(), new GeneratorHolder{generator},
                                                       [](Napi::BasicEnv, GeneratorHolder* h) { delete h; });
  external.TypeTag(&kGeneratorTag);
  return external;
}

static Napi::Value manualSeed(const Napi::CallbackInfo& info) {
  uint64_t seed = static_cast<uint64_t>(toInt(info[0]));
  auto generator = at::globalContext().defaultGenerator(c10::Device(c10::kCPU));
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_current_seed(seed);
  }
  if (at::globalContext().hasCUDA()) {
    for (int i = 0; i < at::detail::getCUDAHooks().getNumGPUs(); ++i) {
      auto cuda = at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i)));
      std::lock_guard<std::mutex> lock(cuda.mutex());
      cuda.set_current_seed(seed);
    }
  }
  return info.Env().Undefined();
}

// ---------------------------------------------------------------------------------------------------------------
// creation

template <class Value>
static at::TensorOptions options(const Value& dtype, const Value& device) {
  return at::TensorOptions().dtype(isNullish(dtype) ? at::kFloat : toDtype(dtype)).device(toDevice(device));
}

// fromBytes(bytes: ArrayBufferView, dtype, shape, device): one copy into new storage. Any view works (a typed array,
// a Buffer, a DataView), over an ArrayBuffer or a SharedArrayBuffer.
static Napi::Value fromBytes(const Napi::CallbackInfo& info) {
  const void* data = nullptr;
  size_t byteLength = 0;
  if (info[0].IsTypedArray()) {
    napi_typedarray_type type;
    size_t length = 0;
    NAPI_THROW_IF_FAILED(info.Env(), napi_get_typedarray_info(info.Env(), info[0], &type, &length,
                                                              const_cast<void**>(&data), nullptr, nullptr),
                         Napi::Value());
    byteLength = info[0].As<Napi::TypedArray>().ByteLength();
  } else if (info[0].IsDataView()) {
    NAPI_THROW_IF_FAILED(info.Env(), napi_get_dataview_info(info.Env(), info[0], &byteLength,
                                                            const_cast<void**>(&data), nullptr, nullptr),
                         Napi::Value());
  } else {
    throw Napi::TypeError::New(info.Env(), "expected a typed array, Buffer or DataView, got " + describe(info[0]));
  }
  at::ScalarType dtype = toDtype(info[1]);
  std::vector<int64_t> shape = intList(info[2]);
  at::Tensor cpu = at::empty(shape, at::TensorOptions().dtype(dtype));
  if (cpu.nbytes() != byteLength)
    throw Napi::RangeError::New(info.Env(), "data has " + std::to_string(byteLength) + " bytes but shape " +
                                               c10::str(cpu.sizes()) + " of " + c10::toString(dtype) + " needs " +
                                               std::to_string(cpu.nbytes()));
  if (byteLength) std::memcpy(cpu.data_ptr(), data, byteLength);
  c10::Device device = toDevice(info[3]);
  return wrap(info.Env(), device.is_cpu() ? cpu : cpu.to(device));
}

// Creation from shapes and numbers only: recorded inside a capture (capture.h), like the ops.
template <class Info>
static at::Tensor emptyOp(const Info& info) {
  return at::empty(intList(info[0]), options(info[1], info[2]));
}
template <class Info>
static at::Tensor fullOp(const Info& info) {
  at::Scalar value = toScalar(info[1]);
  at::TensorOptions opts = options(info[2], info[3]);
  // zeros/ones have faster kernels than the general fill (zeros is a memset)
  if (value.isIntegral(false) && value.toLong() == 0) return at::zeros(intList(info[0]), opts);
  if (value.isIntegral(false) && value.toLong() == 1) return at::ones(intList(info[0]), opts);
  return at::full(intList(info[0]), value, opts);
}
template <class Info>
static at::Tensor arangeOp(const Info& info) {
  return at::arange(toScalar(info[0]), toScalar(info[1]), toScalar(info[2]), options(info[3], info[4]));
}
template <class Info>
static at::Tensor linspaceOp(const Info& info) {
  return at::linspace(toScalar(info[0]), toScalar(info[1]), toInt(info[2]), options(info[3], info[4]));
}
#define DEFINE_CREATION(name) TRT_ONE_TENSOR_BINDING(name, name##Op)
DEFINE_CREATION(empty)
DEFINE_CREATION(full)
DEFINE_CREATION(arange)
DEFINE_CREATION(linspace)
static Napi::Value randn(const Napi::CallbackInfo& info) {
  return wrap(info.Env(), at::randn(intList(info[0]), optionalGenerator(info[3]), options(info[1], info[2])));
}
static Napi::Value rand(const Napi::CallbackInfo& info) {
  return wrap(info.Env(), at::rand(intList(info[0]), optionalGenerator(info[3]), options(info[1], info[2])));
}
// randint(low, high, shape, dtype, device, generator)
static Napi::Value randint(const Napi::CallbackInfo& info) {
  at::TensorOptions opts = at::TensorOptions().dtype(isNullish(info[3]) ? at::kLong : toDtype(info[3])).device(toDevice(info[4]));
  return wrap(info.Env(), at::randint(toInt(info[0]), toInt(info[1]), intList(info[2]), optionalGenerator(info[5]), opts));
}
// uniformPerGenerator(generators: (generator | null)[], device) -> [S] float64: one U[0, 1) draw from each generator
// (null: the default one), exactly what rand([1], float64, generator) gives for each, in one call (a sampler's
// per-row draws).
static Napi::Value uniformPerGenerator(const Napi::CallbackInfo& info) {
  if (!info[0].IsArray()) throw Napi::TypeError::New(info.Env(), "uniformPerGenerator: expected an array of generators");
  Napi::Array generators = info[0].As<Napi::Array>();
  at::TensorOptions opts = at::TensorOptions().dtype(at::kDouble).device(toDevice(info[1]));
  std::vector<at::Tensor> draws;
  draws.reserve(generators.Length());
  for (uint32_t i = 0; i < generators.Length(); ++i) draws.push_back(at::rand({1}, optionalGenerator(generators.Get(i)), opts));
  return wrap(info.Env(), draws.empty() ? at::empty({0}, opts) : at::cat(draws));
}
// normal_(t, mean, std, generator), uniform_(t, from, to, generator): in place, for initialisation.
static Napi::Value normal_(const Napi::CallbackInfo& info) {
  at::Tensor t = unwrap(info[0]);
  t.normal_(toDouble(info[1]), toDouble(info[2]), optionalGenerator(info[3]));
  return info.Env().Undefined();
}
static Napi::Value uniform_(const Napi::CallbackInfo& info) {
  at::Tensor t = unwrap(info[0]);
  t.uniform_(toDouble(info[1]), toDouble(info[2]), optionalGenerator(info[3]));
  return info.Env().Undefined();
}

// ---------------------------------------------------------------------------------------------------------------
// metadata and read-back

static Napi::Value shape(const Napi::CallbackInfo& info) {
  // the handle is a named value: GCC 13+ warns (-Wdangling-reference) where unwrap's argument is a temporary,
  // although the reference is to the tensor the handle's JavaScript object keeps
  const Napi::Value handle = info[0];
  const at::Tensor& t = unwrap(handle);
  Napi::Array out = Napi::Array::New(info.Env(), t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) out.Set(static_cast<uint32_t>(i), Napi::Number::New(info.Env(), static_cast<double>(t.size(i))));
  return out;
}
static Napi::Value strides(const Napi::CallbackInfo& info) {
  const Napi::Value handle = info[0];
  const at::Tensor& t = unwrap(handle);
  Napi::Array out = Napi::Array::New(info.Env(), t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) out.Set(static_cast<uint32_t>(i), Napi::Number::New(info.Env(), static_cast<double>(t.stride(i))));
  return out;
}
static Napi::Value dtype(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<int>(unwrap(info[0]).scalar_type()));
}
static Napi::Value device(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), unwrap(info[0]).device().str());
}
static Napi::Value isContiguous(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), unwrap(info[0]).is_contiguous());
}
// in-place writes so far to this tensor's storage (shared with its views): a copy made from it is stale once it moved
static Napi::Value version(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(unwrap(info[0])._version()));
}
static Napi::Value dataPtr(const Napi::CallbackInfo& info) {
  return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(unwrap(info[0]).data_ptr())));
}

// toBytes(t, copy): the tensor's bytes (row-major, on the CPU). copy=false gives a zero-copy view that keeps the
// tensor alive until the buffer is collected; use it only for immediate writes.
static Napi::Value toBytes(const Napi::CallbackInfo& info) {
  at::Tensor t = unwrap(info[0]).detach();
  if (!t.device().is_cpu()) t = t.to(c10::kCPU);
  t = t.contiguous();
  bool copy = toBool(info[1]);
  size_t nbytes = t.nbytes();
  if (copy || nbytes == 0) {
    Napi::ArrayBuffer buffer = Napi::ArrayBuffer::New(info.Env(), nbytes);
    if (nbytes) std::memcpy(buffer.Data(), t.data_ptr(), nbytes);
    return buffer;
  }
  auto* keep = new at::Tensor(t);
  return Napi::ArrayBuffer::New(info.Env(), keep->data_ptr(), nbytes, [](Napi::BasicEnv, void*, at::Tensor* k) { delete k; }, keep);
}

static Napi::Value item(const Napi::CallbackInfo& info) {
  const Napi::Value handle = info[0];
  const at::Tensor& t = unwrap(handle);
  if (t.numel() != 1) throw Napi::Error::New(info.Env(), "item() needs a tensor with one element, got shape " + c10::str(t.sizes()));
  at::Scalar s = t.item();
  if (s.isBoolean()) return Napi::Boolean::New(info.Env(), s.toBool());
  if (s.isIntegral(false)) return Napi::Number::New(info.Env(), static_cast<double>(s.toLong()));
  return Napi::Number::New(info.Env(), s.toDouble());
}

// dispose(handle): frees the handle's slot (the tensor goes when nothing else uses it).
static Napi::Value dispose(const Napi::CallbackInfo& info) {
  release(info.Env(), info[0]);
  return info.Env().Undefined();
}

// ---------------------------------------------------------------------------------------------------------------
// the C allocator
//
// libtorch's CPU tensors come from malloc. glibc hands out blocks of 128 KiB and more (up to a threshold that grows
// to at most 32 MiB) as separate mappings and unmaps them on free, and it returns the free top of its heap to the
// system beyond 128 KiB; each new block is then faulted in and zeroed by the kernel page by page. A training step
// frees and allocates the same activations every step (the 48.8M bench model at 4 x 64 tokens: its [4, 64, 49152]
// logits and their gradient, 48 MiB each), so it spent about half its time there: 1.4-1.7 s per step with a third of
// it system time, against 0.7-0.9 s with these settings (bench/README.md). So, once per process: blocks under
// 128 MiB come from the heap, and up to 1 GiB of free heap top stays mapped for the next step; a block of 128 MiB or
// more is still its own mapping, returned at once on dispose. A process started with its own glibc malloc settings
// (GLIBC_TUNABLES with glibc.malloc.*, or MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_) keeps them.
constexpr int kMmapThreshold = 128 << 20;
constexpr int kTrimThreshold = 1 << 30;

struct AllocatorTuning {
  bool applied = false;
  std::string reason;  // why not, when not applied
};

static AllocatorTuning tuneAllocator() {
  AllocatorTuning result;
#if defined(__GLIBC__)
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) {
    result.reason = "GLIBC_TUNABLES sets glibc.malloc.* for this process";
  } else if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr) {
    result.reason = "MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ is set for this process";
  } else if (mallopt(M_MMAP_THRESHOLD, kMmapThreshold) != 1 || mallopt(M_TRIM_THRESHOLD, kTrimThreshold) != 1) {
    result.reason = "glibc refused the settings (mallopt)";
  } else {
    result.applied = true;
  }
#else
  result.reason = "not glibc's malloc";
#endif
  return result;
}

static const AllocatorTuning& allocatorTuning() {
  static const AllocatorTuning tuning = tuneAllocator();  // once per process, whichever thread loads the addon first
  return tuning;
}

// allocatorTuning() -> {applied, mmapThreshold, trimThreshold, reason}: the malloc settings above, as applied.
static Napi::Value allocatorTuningInfo(const Napi::CallbackInfo& info) {
  const AllocatorTuning& tuning = allocatorTuning();
  Napi::Env env = info.Env();
  Napi::Object result = Napi::Object::New(env);
  result.Set("applied", tuning.applied);
  result.Set("mmapThreshold", tuning.applied ? Napi::Value(Napi::Number::New(env, kMmapThreshold)) : env.Null());
  result.Set("trimThreshold", tuning.applied ? Napi::Value(Napi::Number::New(env, kTrimThreshold)) : env.Null());
  result.Set("reason", tuning.applied ? env.Null() : Napi::Value(Napi::String::New(env, tuning.reason)));
  return result;
}

// accountMemory(handle): reports the bytes of the tensor's storage to V8 as external memory (once per handle; views
// and storage-less tensors add none), for a tensor the GC may free (under the TypeScript Tensor's FinalizationRegistry
// safety net), so that the GC sees what it would free. Tensors a scope disposes are never reported: a training step
// that allocates and frees a few 50-100 MB tensors would otherwise cross V8's external-memory limit and force a
// full mark-compact GC several times a step, for nothing to collect (~20 ms a step measured, 48.8M model).
static Napi::Value accountMemory(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Entry* e = liveEntry(env, info[0]);
  if (e == nullptr || e->accountedBytes != 0) return env.Undefined();
  e->accountedBytes = (!e->tensor.is_view() && e->tensor.has_storage()) ? static_cast<int64_t>(e->tensor.storage().nbytes()) : 0;
  adjustExternal(env, e->accountedBytes);
  return env.Undefined();
}

static Napi::Value reportedMemory(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(reportedBytes));
}

static Napi::Value liveHandleCount(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(liveHandles.load()));
}

// ---------------------------------------------------------------------------------------------------------------
// autograd

static Napi::Value setRequiresGrad(const Napi::CallbackInfo& info) {
  at::Tensor t = unwrap(info[0]);
  t.requires_grad_(toBool(info[1]));
  return info.Env().Undefined();
}
static Napi::Value requiresGrad(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), unwrap(info[0]).requires_grad());
}
static Napi::Value isLeaf(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), unwrap(info[0]).is_leaf());
}
// backward(t, gradient?, retainGraph, createGraph)
static Napi::Value backward(const Napi::CallbackInfo& info) {
  const Napi::Value handle = info[0];
  const at::Tensor& t = unwrap(handle);
  std::optional<bool> retain;
  if (!isNullish(info[2])) retain = toBool(info[2]);
  t.backward(unwrapOptional(info[1]).value_or(at::Tensor()), retain, toBool(info[3]));
  return info.Env().Undefined();
}
static Napi::Value grad(const Napi::CallbackInfo& info) {
  return wrap(info.Env(), unwrap(info[0]).grad());
}
static Napi::Value setGrad(const Napi::CallbackInfo& info) {
  at::Tensor t = unwrap(info[0]);
  t.mutable_grad() = isNullish(info[1]) ? at::Tensor() : unwrap(info[1]);
  return info.Env().Undefined();
}
static Napi::Value retainGrad(const Napi::CallbackInfo& info) {
  unwrap(info[0]).retain_grad();
  return info.Env().Undefined();
}
// Grad mode is thread-local in libtorch: this sets it for the calling JS thread (main or worker). Recorded inside a
// capture, so that a replay switches grad mode where the step did.
template <class Info>
static bool setGradEnabledOp(const Info& info) {
  c10::GradMode::set_enabled(toBool(info[0]));
  return true;
}
static void setGradEnabledBindingReplay(const ReplayInfo& info, std::vector<at::Tensor>&) { setGradEnabledOp(info); }
static Napi::Value previousGradMode(Napi::Env env, bool) { return env.Undefined(); }
TRT_RECORDED_BINDING(setGradEnabledBinding, setGradEnabledOp, noOutputs, previousGradMode)
static Napi::Value setGradEnabled(const Napi::CallbackInfo& info) {
  bool previous = c10::GradMode::is_enabled();
  setGradEnabledBinding(info);
  return Napi::Boolean::New(info.Env(), previous);
}
static Napi::Value isGradEnabled(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), c10::GradMode::is_enabled());
}
// gradOf(outputs, inputs, gradOutputs?, retainGraph, createGraph): torch.autograd.grad.
static Napi::Value gradOf(const Napi::CallbackInfo& info) {
  std::vector<at::Tensor> outputs = tensorList(info[0]);
  std::vector<at::Tensor> inputs = tensorList(info[1]);
  std::vector<at::Tensor> gradOutputs;
  if (!isNullish(info[2])) gradOutputs = tensorList(info[2]);
  else for (const auto& o : outputs) gradOutputs.push_back(at::ones_like(o));
  if (gradOutputs.size() != outputs.size())
    throw Napi::RangeError::New(info.Env(), "gradOf: " + std::to_string(outputs.size()) + " outputs but " +
                                               std::to_string(gradOutputs.size()) + " output gradients");
  std::optional<bool> retain;
  if (!isNullish(info[3])) retain = toBool(info[3]);
  bool create = toBool(info[4]);
  // ATen exposes only Tensor::_backward(inputs=...), which accumulates into .grad: park the inputs' existing
  // gradients, collect the fresh ones, then put the old ones back. The guard puts them back on every path, so a
  // backward that throws (half-way through the outputs, say) leaves each input's .grad as it was.
  struct ParkedGrads {
    std::vector<at::Tensor>& inputs;
    std::vector<at::Tensor> saved;
    explicit ParkedGrads(std::vector<at::Tensor>& in) : inputs(in) {
      saved.reserve(inputs.size());
      for (auto& t : inputs) saved.push_back(std::exchange(t.mutable_grad(), at::Tensor()));
    }
    // in reverse, so an input listed twice gets back what its first entry saved
    ~ParkedGrads() {
      for (size_t i = inputs.size(); i-- > 0;) inputs[i].mutable_grad() = std::move(saved[i]);
    }
  };
  std::vector<at::Tensor> grads(inputs.size());
  {
    ParkedGrads parked(inputs);
    for (size_t i = 0; i < outputs.size(); ++i) {
      bool last = i + 1 == outputs.size();
      outputs[i]._backward(inputs, gradOutputs[i], last ? retain : std::optional<bool>(true), create);
    }
    for (size_t i = 0; i < inputs.size(); ++i) grads[i] = inputs[i].grad();
  }
  return wrapList(info.Env(), grads);
}

// ---------------------------------------------------------------------------------------------------------------
// optimizers: libtorch's fused kernels; the bookkeeping (groups, state, schedules) lives in TypeScript.

// fusedAdamW(params, grads, expAvgs, expAvgSqs, steps, lr, beta1, beta2, weightDecay, eps): one AdamW step
// (Loshchilov & Hutter 2019) over a parameter group; steps are float32 scalar tensors, advanced here.
static Napi::Value fusedAdamW(const Napi::CallbackInfo& info) {
  at::NoGradGuard noGrad;
  std::vector<at::Tensor> params = tensorList(info[0]), grads = tensorList(info[1]), expAvgs = tensorList(info[2]),
                          expAvgSqs = tensorList(info[3]), steps = tensorList(info[4]);
  // as torch.optim.AdamW(fused=True): the step counts advance before the update (one multi-tensor op on a GPU)
  at::_foreach_add_(steps, 1);
  at::_fused_adamw_(params, grads, expAvgs, expAvgSqs, {}, steps, toDouble(info[5]), toDouble(info[6]),
                    toDouble(info[7]), toDouble(info[8]), toDouble(info[9]), false, false);
  return info.Env().Undefined();
}

// clipGradNorm(grads, maxNorm, normType) -> total norm (float32 scalar tensor); scales grads in place when needed.
static Napi::Value clipGradNorm(const Napi::CallbackInfo& info) {
  at::NoGradGuard noGrad;
  std::vector<at::Tensor> grads = tensorList(info[0]);
  double maxNorm = toDouble(info[1]);
  double normType = toDouble(info[2]);
  if (grads.empty()) return wrap(info.Env(), at::zeros({}, at::kFloat));
  std::vector<at::Tensor> norms = at::_foreach_norm(grads, normType);
  for (auto& n : norms) n = n.to(at::kFloat);
  at::Tensor total = std::isinf(normType) ? at::stack(norms).max() : at::linalg_vector_norm(at::stack(norms), normType);
  at::Tensor coefficient = at::clamp_max(maxNorm / (total + 1e-6), 1.0);
  // one multi-tensor product per device and dtype, as torch.nn.utils.clip_grad_norm_ (one kernel each on a GPU)
  std::vector<std::vector<at::Tensor>> groups;
  for (auto& g : grads) {
    auto same = [&](const std::vector<at::Tensor>& group) {
      return group[0].device() == g.device() && group[0].scalar_type() == g.scalar_type();
    };
    auto it = std::find_if(groups.begin(), groups.end(), same);
    if (it == groups.end()) groups.push_back({g});
    else it->push_back(g);
  }
  for (auto& group : groups) at::_foreach_mul_(group, coefficient.to(group[0].device(), group[0].scalar_type()));
  return wrap(info.Env(), total);
}

// ---------------------------------------------------------------------------------------------------------------
// file I/O: read bytes straight from a file into a tensor's storage (safetensors loading), no JS copy.

// readFileInto(path, byteOffset, tensor): fills a contiguous CPU tensor with nbytes from the file.
static Napi::Value readFileInto(const Napi::CallbackInfo& info) {
  std::string path = info[0].As<Napi::String>().Utf8Value();
  int64_t offset = toInt(info[1]);
  at::Tensor t = unwrap(info[2]);
  if (!t.device().is_cpu() || !t.is_contiguous()) throw Napi::Error::New(info.Env(), "readFileInto needs a contiguous CPU tensor");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Napi::Error::New(info.Env(), path + ": " + std::strerror(errno));
  char* dst = static_cast<char*>(t.data_ptr());
  size_t remaining = t.nbytes();
  int64_t at = offset;
  while (remaining > 0) {
    ssize_t n = ::pread(fd, dst, remaining, at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = n < 0 ? std::strerror(errno) : "unexpected end of file";
      ::close(fd);
      throw Napi::Error::New(info.Env(), path + ": reading " + std::to_string(t.nbytes()) + " bytes at offset " +
                                             std::to_string(offset) + ": " + why);
    }
    dst += n;
    remaining -= static_cast<size_t>(n);
    at += n;
  }
  ::close(fd);
  return info.Env().Undefined();
}

// ---------------------------------------------------------------------------------------------------------------
// threads, devices, cross-thread transfer

static Napi::Value setNumThreads(const Napi::CallbackInfo& info) {
  at::set_num_threads(static_cast<int>(toInt(info[0])));
  return info.Env().Undefined();
}
static Napi::Value getNumThreads(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), at::get_num_threads());
}
static Napi::Value cudaDeviceCount(const Napi::CallbackInfo& info) {
  int count = at::globalContext().hasCUDA() ? at::detail::getCUDAHooks().getNumGPUs() : 0;
  return Napi::Number::New(info.Env(), count);
}
static Napi::Value buildInfo(const Napi::CallbackInfo& info) {
  Napi::Object out = Napi::Object::New(info.Env());
  out.Set("torchVersion", TORCH_VERSION);
  out.Set("config", at::show_config());
  out.Set("parallel", at::get_parallel_info());
  return out;
}

// Cross-thread transfer. exportTensor(t, owner) puts a new reference to t in a process-wide registry under a fresh
// id (a bigint in JS; ids are never reused) and importTensor(id), on any thread, takes it out: exactly once. A second
// import, a released id or one that was never issued is an Error naming the id, never a memory access. An export that
// is never imported holds its tensor until releaseExported(id) frees it, or releaseExportsOf(owner) frees every
// export tagged with that owner (src/torch/worker.ts tags a worker's messages with its threadId and sweeps them when
// the worker exits). liveExportCount() counts what is still registered, for leak tests.
namespace {
struct Exported {
  at::Tensor tensor;
  uint64_t owner;
};
struct ExportRegistry {
  std::mutex mutex;
  std::unordered_map<uint64_t, Exported> tensors;
  uint64_t nextId = 1;
};
// Never destroyed: exports still registered at process exit must not be freed after libtorch's own statics are.
ExportRegistry& exportRegistry() {
  static auto* registry = new ExportRegistry();
  return *registry;
}

uint64_t exportId(const Napi::Value& value) {
  if (!value.IsBigInt()) throw Napi::TypeError::New(value.Env(), "expected an exported tensor id (a bigint), got " + describe(value));
  bool lossless = false;
  uint64_t id = value.As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless || id == 0) throw Napi::Error::New(value.Env(), "exported tensor " + describe(value) + " does not exist");
  return id;
}

uint64_t exportOwner(const Napi::Value& value) {
  if (isNullish(value)) return 0;
  int64_t owner = toInt(value);
  if (owner < 0) throw Napi::RangeError::New(value.Env(), "an export owner is a non-negative integer, got " + describe(value));
  return static_cast<uint64_t>(owner);
}

// Takes an export out of the registry (an empty tensor when it is not there). The caller drops it outside the lock:
// freeing a large storage (or a CUDA block) must not hold up other threads' transfers.
at::Tensor takeExport(uint64_t id) {
  ExportRegistry& registry = exportRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  auto node = registry.tensors.extract(id);
  return node.empty() ? at::Tensor() : std::move(node.mapped().tensor);
}
}  // namespace

static Napi::Value exportTensor(const Napi::CallbackInfo& info) {
  at::Tensor t = unwrap(info[0]);
  uint64_t owner = exportOwner(info[1]);
  ExportRegistry& registry = exportRegistry();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    id = registry.nextId++;
    registry.tensors.emplace(id, Exported{std::move(t), owner});
  }
  return Napi::BigInt::New(info.Env(), id);
}

static Napi::Value importTensor(const Napi::CallbackInfo& info) {
  uint64_t id = exportId(info[0]);
  at::Tensor t = takeExport(id);
  if (!t.defined())
    throw Napi::Error::New(info.Env(), "exported tensor " + std::to_string(id) +
                                           "n is not registered: it was already imported or released, or never exported");
  return wrap(info.Env(), std::move(t));
}

// releaseExported(id) -> whether it was still registered (an id already imported or released is not an error here:
// whoever drops a message cannot know whether the other side got to it first).
static Napi::Value releaseExported(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), takeExport(exportId(info[0])).defined());
}

// releaseExportsOf(owner) -> how many exports tagged with owner were still registered (now freed).
static Napi::Value releaseExportsOf(const Napi::CallbackInfo& info) {
  uint64_t owner = exportOwner(info[0]);
  if (owner == 0) throw Napi::RangeError::New(info.Env(), "releaseExportsOf needs an owner other than 0 (untagged)");
  std::vector<at::Tensor> dropped;
  {
    ExportRegistry& registry = exportRegistry();
    std::lock_guard<std::mutex> lock(registry.mutex);
    for (auto it = registry.tensors.begin(); it != registry.tensors.end();) {
      if (it->second.owner == owner) {
        dropped.push_back(std::move(it->second.tensor));
        it = registry.tensors.erase(it);
      } else {
        ++it;
      }
    }
  }
  return Napi::Number::New(info.Env(), static_cast<double>(dropped.size()));
}

static Napi::Value liveExportCount(const Napi::CallbackInfo& info) {
  ExportRegistry& registry = exportRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  return Napi::Number::New(info.Env(), static_cast<double>(registry.tensors.size()));
}

void registerCore(Napi::Object exports) {
  allocatorTuning();  // before the first tensor
  TRT_EXPORT(exports, "createGenerator", createGenerator);
  TRT_EXPORT(exports, "manualSeed", manualSeed);
  TRT_EXPORT(exports, "fromBytes", fromBytes);
  TRT_EXPORT_RECORDED(exports, "empty", empty);
  TRT_EXPORT_RECORDED(exports, "full", full);
  TRT_EXPORT_RECORDED(exports, "arange", arange);
  TRT_EXPORT_RECORDED(exports, "linspace", linspace);
  TRT_EXPORT(exports, "randn", randn);
  TRT_EXPORT(exports, "rand", rand);
  TRT_EXPORT(exports, "randint", randint);
  TRT_EXPORT(exports, "uniformPerGenerator", uniformPerGenerator);
  TRT_EXPORT(exports, "normal_", normal_);
  TRT_EXPORT(exports, "uniform_", uniform_);
  TRT_EXPORT_PASSIVE(exports, "shape", shape);
  TRT_EXPORT_PASSIVE(exports, "strides", strides);
  TRT_EXPORT_PASSIVE(exports, "dtype", dtype);
  TRT_EXPORT_PASSIVE(exports, "device", device);
  TRT_EXPORT_PASSIVE(exports, "isContiguous", isContiguous);
  TRT_EXPORT_PASSIVE(exports, "version", version);
  TRT_EXPORT(exports, "dataPtr", dataPtr);
  TRT_EXPORT(exports, "toBytes", toBytes);
  TRT_EXPORT(exports, "item", item);
  TRT_EXPORT_PASSIVE(exports, "dispose", dispose);
  TRT_EXPORT_PASSIVE(exports, "liveHandleCount", liveHandleCount);
  TRT_EXPORT_PASSIVE(exports, "accountMemory", accountMemory);
  TRT_EXPORT_PASSIVE(exports, "reportedMemory", reportedMemory);
  TRT_EXPORT_PASSIVE(exports, "allocatorTuning", allocatorTuningInfo);
  TRT_EXPORT(exports, "setRequiresGrad", setRequiresGrad);
  TRT_EXPORT_PASSIVE(exports, "requiresGrad", requiresGrad);
  TRT_EXPORT_PASSIVE(exports, "isLeaf", isLeaf);
  TRT_EXPORT(exports, "backward", backward);
  TRT_EXPORT(exports, "grad", grad);
  TRT_EXPORT(exports, "setGrad", setGrad);
  TRT_EXPORT(exports, "retainGrad", retainGrad);
  TRT_EXPORT_RECORDED(exports, "setGradEnabled", setGradEnabled);
  TRT_EXPORT_PASSIVE(exports, "isGradEnabled", isGradEnabled);
  TRT_EXPORT(exports, "gradOf", gradOf);
  TRT_EXPORT(exports, "fusedAdamW", fusedAdamW);
  TRT_EXPORT(exports, "clipGradNorm", clipGradNorm);
  TRT_EXPORT(exports, "readFileInto", readFileInto);
  TRT_EXPORT(exports, "setNumThreads", setNumThreads);
  TRT_EXPORT_PASSIVE(exports, "getNumThreads", getNumThreads);
  TRT_EXPORT_PASSIVE(exports, "cudaDeviceCount", cudaDeviceCount);
  TRT_EXPORT_PASSIVE(exports, "buildInfo", buildInfo);
  TRT_EXPORT(exports, "exportTensor", exportTensor);
  TRT_EXPORT(exports, "importTensor", importTensor);
  TRT_EXPORT(exports, "releaseExported", releaseExported);
  TRT_EXPORT(exports, "releaseExportsOf", releaseExportsOf);
  TRT_EXPORT(exports, "liveExportCount", liveExportCount);
}

}  // namespace trt
