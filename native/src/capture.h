// Capture and replay of a step: a sequence of ATen calls recorded once, replayed from C++ in one native call.
//
// The model stays in TypeScript: while a capture is open on a thread, every op binding of that thread runs as usual
// and also records how it read its arguments (a tensor, an integer, a list, "was it null?") and which tensors it
// produced. Tensors are recorded by identity: a captured input (bound again at each replay), the output of an
// earlier recorded op, or else a constant held by reference (weights, a KV cache written in place). A replay runs the
// same ATen calls with the same arguments over the new inputs, so it gives what the eager step would have given, bit
// for bit, as long as the step's JavaScript did not depend on the inputs' values: a binding that reads values back
// or makes a tensor from JavaScript data (item, toBytes, fromBytes, backward, ...) marks the capture as not
// replayable, with the binding's name as the reason, and the step it was recording still completes eagerly.
//
// Op bindings are templates over their argument source (see DEFINE_*_OP in ops.cpp): Napi::CallbackInfo when eager,
// RecordingInfo while capturing, ReplayInfo when replayed. The conversion functions of common.h have overloads for
// the two value types below, so an op is written once, as one expression.
#pragma once
#include "common.h"

#include <functional>
#include <memory>
#include <stdexcept>
#include <unordered_map>

namespace trt {

// One argument of a recorded op, as the op read it. The predicates the op asked (null? array? string?) are kept
// beside the converted value, so a replay answers them the same way and takes the same branch.
struct RecordedArg {
  enum class Kind : uint8_t { Unread, Tensor, Int, Double, Bool, Scalar, IntList, String, Dtype, Device, Generator, Tensors };
  Kind kind = Kind::Unread;
  bool nullish = false;
  bool array = false;
  bool string = false;
  int32_t ref = -1;           // Tensor: slot in the value table
  std::vector<int32_t> refs;  // Tensors: slots (-1: a null entry of an index list)
  int64_t integer = 0;
  double number = 0;
  at::Scalar scalar;
  std::vector<int64_t> ints;
  std::string text;
  at::ScalarType dtype = at::kFloat;
  c10::Device device{c10::kCPU};
  std::optional<at::Generator> generator;
};

struct ReplayInfo;
using ReplayFn = void (*)(const ReplayInfo& info, std::vector<at::Tensor>& outputs);

// ---- while recording: each value converts as usual and writes down how it was read ----
struct RecordingValue {
  Napi::Value value;
  RecordedArg* arg;
  Recorder* recorder;
  bool IsArray() const { return arg->array = value.IsArray(); }
  bool IsString() const { return arg->string = value.IsString(); }
  Napi::Env Env() const { return value.Env(); }
};

struct RecordingInfo {
  static constexpr size_t kMaxArgs = 12;
  const Napi::CallbackInfo& info;
  Recorder* recorder;
  mutable std::vector<RecordedArg> args;  // sized once: values handed out keep pointers into it
  RecordingInfo(const Napi::CallbackInfo& callback, Recorder* r) : info(callback), recorder(r), args(kMaxArgs) {}
  RecordingValue operator[](size_t i) const;
  Napi::Env Env() const { return info.Env(); }
};

// ---- while replaying: values answer from the record ----
struct ReplayValue {
  const RecordedArg* arg;
  const std::vector<at::Tensor>* table;
  bool IsArray() const { return arg->array; }
  bool IsString() const { return arg->string; }
};

struct ReplayInfo {
  const RecordedArg* args;
  size_t count;
  const std::vector<at::Tensor>* table;
  ReplayValue operator[](size_t i) const;
};

// ---- conversions (common.h has the Napi::Value versions) ----
bool isNullish(const RecordingValue& v);
const at::Tensor& unwrap(const RecordingValue& v, const char* what = "tensor");
std::optional<at::Tensor> unwrapOptional(const RecordingValue& v);
int64_t toInt(const RecordingValue& v);
double toDouble(const RecordingValue& v);
bool toBool(const RecordingValue& v);
std::optional<double> optionalDouble(const RecordingValue& v);
std::vector<int64_t> intList(const RecordingValue& v);
std::optional<std::vector<int64_t>> optionalIntList(const RecordingValue& v);
at::Scalar toScalar(const RecordingValue& v);
std::optional<at::Scalar> optionalScalar(const RecordingValue& v);
at::ScalarType toDtype(const RecordingValue& v);
std::optional<at::ScalarType> optionalDtype(const RecordingValue& v);
c10::Device toDevice(const RecordingValue& v);
std::optional<at::Generator> optionalGenerator(const RecordingValue& v);
at::Tensor tensorOrScalar(const RecordingValue& v);
RecordingValue boxedScalar(const RecordingValue& v);
std::vector<at::Tensor> tensorList(const RecordingValue& v);
c10::List<std::optional<at::Tensor>> indexList(const RecordingValue& v);
std::string toText(const RecordingValue& v);

bool isNullish(const ReplayValue& v);
const at::Tensor& unwrap(const ReplayValue& v, const char* what = "tensor");
std::optional<at::Tensor> unwrapOptional(const ReplayValue& v);
int64_t toInt(const ReplayValue& v);
double toDouble(const ReplayValue& v);
bool toBool(const ReplayValue& v);
std::optional<double> optionalDouble(const ReplayValue& v);
std::vector<int64_t> intList(const ReplayValue& v);
std::optional<std::vector<int64_t>> optionalIntList(const ReplayValue& v);
at::Scalar toScalar(const ReplayValue& v);
std::optional<at::Scalar> optionalScalar(const ReplayValue& v);
at::ScalarType toDtype(const ReplayValue& v);
std::optional<at::ScalarType> optionalDtype(const ReplayValue& v);
c10::Device toDevice(const ReplayValue& v);
std::optional<at::Generator> optionalGenerator(const ReplayValue& v);
at::Tensor tensorOrScalar(const ReplayValue& v);
ReplayValue boxedScalar(const ReplayValue& v);
std::vector<at::Tensor> tensorList(const ReplayValue& v);
c10::List<std::optional<at::Tensor>> indexList(const ReplayValue& v);
std::string toText(const ReplayValue& v);

// Appends one executed op: its replay function, how it read its arguments, the tensors it returned.
void recordStep(Recorder* recorder, ReplayFn fn, const char* name, RecordingInfo& info,
                const std::vector<at::Tensor>& outputs);
// (activeRecorder and poisonCapture are declared in common.h: every binding's guard uses them.)

// A binding that records itself (see DEFINE_TENSOR_OP in ops.cpp): `run` is a template over its argument source,
// name##Replay its replay function, `outputs` lists the tensors of run's result and `result` turns it into the JS
// value.
#define TRT_RECORDED_BINDING(name, run, outputs, result)                          \
  static Napi::Value name(const Napi::CallbackInfo& info) {                       \
    if (::trt::Recorder* recorder = ::trt::activeRecorder()) {                    \
      ::trt::RecordingInfo recording(info, recorder);                             \
      auto value = run(recording);                                                \
      ::trt::recordStep(recorder, &name##Replay, #name, recording, outputs(value)); \
      return result(info.Env(), value);                                           \
    }                                                                             \
    return result(info.Env(), run(info));                                         \
  }
// The replay function and the binding of an op with one tensor result, from its template `run` (over the argument
// source): DEFINE_TENSOR_OP and the creation ops, and the kernels of kernels.cpp.
#define TRT_ONE_TENSOR_BINDING(name, run)                                                                     \
  static void name##Replay(const ReplayInfo& info, std::vector<at::Tensor>& out) { out.push_back(run(info)); } \
  TRT_RECORDED_BINDING(name, run, oneOutput, wrap)
// ---- CUDA graphs for captured steps (cuda_graph.cpp) ----
// A step recorded as a CUDA graph: replay copies the inputs into the graph's static inputs, launches it on the
// current stream and returns copies of its static outputs.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  virtual std::vector<at::Tensor> replay(const std::vector<at::Tensor>& inputs) = 0;
};
// Runs a step's recorded ops over the given inputs and returns its outputs.
using StepRunner = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;
// Recording a graph failed after the step's eager run succeeded (its outputs were already handed out): `what()` is
// the reason, typically an op that cannot run inside a graph.
struct GraphCaptureFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Runs `run` once eagerly over copies of `inputs` (its outputs go to firstOutputs), then records it as a CUDA graph on
// `device`. Throws GraphCaptureFailed when recording fails after the eager run, anything else when the eager run fails.
std::unique_ptr<StepGraph> recordStepGraph(c10::Device device, const std::vector<at::Tensor>& inputs,
                                           const StepRunner& run, std::vector<at::Tensor>& firstOutputs);
// Why this addon cannot record CUDA graphs; nullptr when it can.
const char* cudaGraphsUnavailable();

inline std::vector<at::Tensor> oneOutput(const at::Tensor& t) { return {t}; }
inline std::vector<at::Tensor> pairOutputs(const std::tuple<at::Tensor, at::Tensor>& p) {
  return {std::get<0>(p), std::get<1>(p)};
}
inline const std::vector<at::Tensor>& listOutputs(const std::vector<at::Tensor>& list) { return list; }
inline std::vector<at::Tensor> noOutputs(bool) { return {}; }
inline Napi::Value undefinedResult(Napi::Env env, bool) { return env.Undefined(); }


}  // namespace trt
