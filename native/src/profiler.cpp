// libtorch's profiler (Kineto) for the calling thread: which ATen ops a piece of work ran, how long each took on the
// CPU, and on a GPU which kernels ran and for how long; optionally a Chrome trace (chrome://tracing, Perfetto).
//
//   profilerStart(withDevice)   starts profiling this thread's ops (and the threads its work runs on: autograd's
//                               backward, the intra-op pool) plus, with withDevice and a CUDA libtorch, CUDA kernels
//   profilerRangePush(name)     opens a named range (a user annotation in the trace and in the events)
//   profilerRangePop()          closes the innermost one
//   profilerStop(tracePath)     stops, writes the trace when tracePath is a string, and returns the events as columns
//                               (a range still open is an error, after the profiler has stopped):
//     {names: string[], name: Int32Array, startUs: Float64Array, durationUs: Float64Array, thread: Float64Array,
//      onDevice: Uint8Array (1 = a device activity such as a CUDA kernel or copy)}
// The aggregation into a per-op table is in TypeScript (src/torch/profiler.ts).
#include "common.h"

#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <memory>
#include <set>
#include <unordered_map>

namespace trt {
namespace {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

struct OpenRange {
  std::string name;  // kept alive for as long as the RecordFunction may read it
  std::unique_ptr<at::RecordFunction> record;
};
thread_local std::vector<OpenRange> openRanges;

Napi::Value profilerStart(const Napi::CallbackInfo& info) {
  if (impl::profilerEnabled()) throw std::runtime_error("the profiler is already running on this thread");
  const bool withDevice = toBool(info[0]);
  impl::ProfilerConfig config(impl::ProfilerState::KINETO);
  std::set<impl::ActivityType> activities{impl::ActivityType::CPU};
  if (withDevice && at::hasCUDA()) activities.insert(impl::ActivityType::CUDA);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  return info.Env().Undefined();
}

Napi::Value profilerRangePush(const Napi::CallbackInfo& info) {
  OpenRange range{toText(info[0]), std::make_unique<at::RecordFunction>(at::RecordScope::USER_SCOPE)};
  if (range.record->isActive()) range.record->before(range.name);
  openRanges.push_back(std::move(range));
  return info.Env().Undefined();
}

Napi::Value profilerRangePop(const Napi::CallbackInfo& info) {
  if (openRanges.empty()) throw std::runtime_error("profilerRangePop: no range is open on this thread");
  openRanges.back().record->end();
  openRanges.pop_back();
  return info.Env().Undefined();
}

Napi::Value profilerStop(const Napi::CallbackInfo& info) {
  if (!impl::profilerEnabled()) throw std::runtime_error("the profiler is not running on this thread");
  if (!openRanges.empty()) {
    // a range left open: close them all and stop anyway (nothing stays running), then say which
    const std::string message = "profilerStop: " + std::to_string(openRanges.size()) +
                                " range(s) still open, the innermost \"" + openRanges.back().name + "\"";
    while (!openRanges.empty()) {
      openRanges.back().record->end();
      openRanges.pop_back();
    }
    prof::disableProfiler();
    throw std::runtime_error(message);
  }
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  if (info[0].IsString()) result->save(toText(info[0]));
  Napi::Env env = info.Env();
  std::vector<const prof::KinetoEvent*> kept;
  for (const prof::KinetoEvent& event : result->events()) {
    if (!event.isHiddenEvent()) kept.push_back(&event);
  }
  const size_t n = kept.size();
  Napi::Int32Array name = Napi::Int32Array::New(env, n);
  Napi::Float64Array startUs = Napi::Float64Array::New(env, n), durationUs = Napi::Float64Array::New(env, n),
                     thread = Napi::Float64Array::New(env, n);
  Napi::Uint8Array onDevice = Napi::Uint8Array::New(env, n);
  std::unordered_map<std::string, int32_t> index;
  Napi::Array names = Napi::Array::New(env);
  for (size_t i = 0; i < n; i++) {
    const prof::KinetoEvent& event = *kept[i];
    std::string eventName = event.name();
    auto [it, added] = index.emplace(eventName, static_cast<int32_t>(index.size()));
    if (added) names.Set(static_cast<uint32_t>(it->second), eventName);
    name[i] = it->second;
    startUs[i] = static_cast<double>(event.startNs()) / 1e3;
    durationUs[i] = static_cast<double>(event.durationNs()) / 1e3;
    thread[i] = static_cast<double>(event.startThreadId());
    onDevice[i] = event.deviceType() == c10::DeviceType::CPU ? 0 : 1;
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("names", names);
  out.Set("name", name);
  out.Set("startUs", startUs);
  out.Set("durationUs", durationUs);
  out.Set("thread", thread);
  out.Set("onDevice", onDevice);
  return out;
}

}  // namespace

void registerProfiler(Napi::Object exports) {
  // harmless during a capture: they only observe (a replay runs without them)
  TRT_EXPORT_PASSIVE(exports, "profilerStart", profilerStart);
  TRT_EXPORT_PASSIVE(exports, "profilerRangePush", profilerRangePush);
  TRT_EXPORT_PASSIVE(exports, "profilerRangePop", profilerRangePop);
  TRT_EXPORT_PASSIVE(exports, "profilerStop", profilerStop);
}

}  // namespace trt
