// Which code libtorch's float32 BLAS runs on this CPU, and MKL's vendor check.
//
// libtorch's x86 builds multiply float32 matrices (linear, matmul, mm, bmm: forward and backward) with MKL, linked
// into libtorch_cpu. MKL takes its AVX-512 code only where its vendor check, mkl_serv_intel_cpu_true(), finds an
// Intel CPU; on AMD's CPUs with AVX-512 (Zen 4, Zen 5) it runs its AVX2 code at about half of what the CPU can do
// (bench/README.md, "MKL's vendor check": on Zen 5 its AVX-512 code multiplies 1.5-2.4x faster at training's and
// prefill's sizes).
// libtorch_cpu exports that function and calls it through its PLT, so the first definition in the process's symbol
// search order is the one MKL calls. This addon, loaded before libtorch (a dependency it brings in), defines it and
// answers from the CPU's features instead of its vendor: yes on Intel (as MKL would), and on other x86 CPUs that have
// what MKL's AVX-512 code uses (AVX-512 F, CD, BW, DQ, VL); no elsewhere (as MKL would). MKL's own settings still
// hold: MKL_ENABLE_INSTRUCTIONS=AVX2 caps it at AVX2 as before (the benchmarks' --isa avx2), and
// TRINITY_MKL_AVX512=off leaves the vendor check to MKL (its answer: Intel or not).
//
// blasInfo() says what happened: whether MKL asked, what it was told, whether its float32 products run AVX-512 code,
// and MKL's own dispatch code (mkl_serv_cpu_detect, undocumented; it moves with the answer, which is what the tests
// check). kernels.cpp reads mklRunsAvx512() for its rule of where the inference layout's prefill runs.
#include <ATen/core/grad_mode.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "common.h"

namespace trt {

namespace {

#if defined(__x86_64__) || defined(_M_X64)
bool cpuIsIntel() { return __builtin_cpu_is("intel"); }
// what MKL's AVX-512 code paths use (its "AVX-512" level, Skylake-SP's set)
bool cpuHasMklAvx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
}
#else
bool cpuIsIntel() { return false; }
bool cpuHasMklAvx512() { return false; }
#endif

// TRINITY_MKL_AVX512: "auto" (default, unset or empty) answers MKL's vendor check from the CPU's features, "off"
// leaves it to MKL. Anything else is refused when the addon loads (registerBlas).
const char* mklSetting() {
  const char* value = std::getenv("TRINITY_MKL_AVX512");
  return value == nullptr || *value == '\0' ? "auto" : value;
}
bool mklSettingValid(const char* value) { return std::strcmp(value, "auto") == 0 || std::strcmp(value, "off") == 0; }

// The answer, decided once (MKL may ask from any thread).
bool mklAnswer() {
  static const bool answer = cpuIsIntel() || (std::strcmp(mklSetting(), "off") != 0 && cpuHasMklAvx512());
  return answer;
}
std::atomic<bool> mklAsked{false};

// MKL_ENABLE_INSTRUCTIONS naming a level below AVX-512: MKL stays there whatever the vendor check says. MKL reads the
// names as written (upper case; "avx2" is ignored and MKL runs its widest code, measured).
bool mklCappedBelowAvx512() {
  const char* cap = std::getenv("MKL_ENABLE_INSTRUCTIONS");
  if (cap == nullptr) return false;
  for (const char* below : {"SSE4_2", "AVX", "AVX2", "AVX2_E1"})
    if (std::strcmp(cap, below) == 0) return true;
  return false;
}

// Runs one small float32 product so that MKL has made its choice (it asks on its first call).
void settleMkl() {
  static const bool settled = [] {
    c10::AutoGradMode noGrad(false);
    at::Tensor a = at::ones({8, 8}, at::kFloat);
    (void)at::mm(a, a);
    return true;
  }();
  (void)settled;
}

// mkl_serv_cpu_detect() in libtorch_cpu, when it has it: MKL's code for the instruction set it dispatches to
// (undocumented: here 0 on AMD without the vendor answer, 5 for AVX2, 7 for AVX-512).
std::optional<int> mklDispatchCode() {
  void* library = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);
  if (library == nullptr) return std::nullopt;
  using Detect = int (*)();
  auto detect = reinterpret_cast<Detect>(dlsym(library, "mkl_serv_cpu_detect"));
  std::optional<int> code;
  if (detect != nullptr) code = detect();
  dlclose(library);
  return code;
}

}  // namespace

// Whether libtorch's float32 BLAS is MKL running its AVX-512 code here.
bool mklRunsAvx512() {
  if (!at::globalContext().hasMKL()) return false;
  settleMkl();
  return mklAsked.load() && mklAnswer() && cpuHasMklAvx512() && !mklCappedBelowAvx512();
}

// blasInfo() -> {library: 'mkl' | 'other', vendorCheck: 'auto' | 'off', asked: boolean, answer: boolean | null,
// avx512: boolean, dispatch: number | null}: MKL's vendor check as this addon answered it (above).
static Napi::Value blasInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object result = Napi::Object::New(env);
  const bool mkl = at::globalContext().hasMKL();
  if (mkl) settleMkl();
  result.Set("library", mkl ? "mkl" : "other");
  result.Set("vendorCheck", mklSetting());
  result.Set("asked", mklAsked.load());
  result.Set("answer", mklAsked.load() ? Napi::Boolean::New(env, mklAnswer()) : env.Null());
  result.Set("avx512", mklRunsAvx512());
  const std::optional<int> code = mkl ? mklDispatchCode() : std::nullopt;
  result.Set("dispatch", code ? Napi::Number::New(env, *code) : env.Null());
  return result;
}

void registerBlas(Napi::Object exports) {
  const char* setting = mklSetting();
  if (!mklSettingValid(setting))
    throw Napi::Error::New(exports.Env(), std::string("TRINITY_MKL_AVX512 must be 'auto' or 'off', got '") + setting +
                                              "' (it says whether MKL may run its AVX-512 code on CPUs not made by "
                                              "Intel: native/src/blas.cpp)");
  TRT_EXPORT_PASSIVE(exports, "blasInfo", blasInfo);
}

}  // namespace trt

// MKL's vendor check (see the top of this file). extern "C" and visible: the name MKL calls.
extern "C" __attribute__((visibility("default"))) int mkl_serv_intel_cpu_true() {
  trt::mklAsked.store(true);
  return trt::mklAnswer() ? 1 : 0;
}
