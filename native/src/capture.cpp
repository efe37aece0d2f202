// Capture and replay (see capture.h): the recorder, the argument conversions of both sides, and the bindings
// captureBegin / captureEnd / captureAbort / replayCapture / releaseCapture / nativeCallCount.
#include "capture.h"

#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

namespace trt {

thread_local uint64_t nativeCalls = 0;

// ---------------------------------------------------------------------------------------------------------------
// binding names, for the reason a capture is not replayable

static std::mutex namesMutex;
static std::unordered_map<const void*, std::string> bindingNames;

void registerBindingName(const void* binding, const char* name) {
  std::lock_guard<std::mutex> lock(namesMutex);
  bindingNames.emplace(binding, name);
}

static std::string bindingName(const void* binding) {
  std::lock_guard<std::mutex> lock(namesMutex);
  auto it = bindingNames.find(binding);
  return it == bindingNames.end() ? std::string("a native call") : it->second;
}

// ---------------------------------------------------------------------------------------------------------------
// the recorder

struct Step {
  ReplayFn fn;
  const char* name;
  std::vector<RecordedArg> args;
  std::vector<int32_t> outputs;  // value slots its results go to
  std::vector<int32_t> release;  // slots no later step reads and the program does not return: dropped once it has run
};

// What an input looked like when recorded: a replay binds only tensors laid out the same way.
struct InputLayout {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  at::ScalarType dtype;
  c10::Device device;
};

class Recorder {
 public:
  // every tensor the step touched, by slot: the inputs first (slots 0..inputs-1), then constants and op results in
  // the order they appeared
  std::vector<at::Tensor> values;
  std::vector<bool> constant;
  std::unordered_map<const c10::TensorImpl*, int32_t> slotOf;
  std::vector<InputLayout> inputs;
  std::vector<Step> steps;
  const void* poisonedBy = nullptr;
  bool gradEnabled = false;

  int32_t newSlot(const at::Tensor& t, bool isConstant) {
    auto slot = static_cast<int32_t>(values.size());
    values.push_back(t);  // held until the capture ends, so no later tensor can reuse the address
    constant.push_back(isConstant);
    if (t.defined()) slotOf[t.unsafeGetTensorImpl()] = slot;
    return slot;
  }
  // The slot a tensor argument reads: an input, an earlier result, or a new constant (held by reference).
  int32_t refOf(const at::Tensor& t) {
    auto it = slotOf.find(t.unsafeGetTensorImpl());
    if (it != slotOf.end()) return it->second;
    return newSlot(t, true);
  }
};

thread_local Recorder* openRecorder = nullptr;

Recorder* activeRecorder() { return openRecorder; }

void poisonCapture(Recorder* recorder, const void* binding) {
  if (recorder->poisonedBy == nullptr) recorder->poisonedBy = binding;
}

void recordStep(Recorder* recorder, ReplayFn fn, const char* name, RecordingInfo& info,
                const std::vector<at::Tensor>& outputs) {
  Step step{fn, name, std::move(info.args), {}, {}};
  // trailing arguments the op never read are dropped
  while (!step.args.empty() && step.args.back().kind == RecordedArg::Kind::Unread && !step.args.back().nullish &&
         !step.args.back().array && !step.args.back().string)
    step.args.pop_back();
  step.outputs.reserve(outputs.size());
  for (const at::Tensor& t : outputs) step.outputs.push_back(recorder->newSlot(t, false));
  recorder->steps.push_back(std::move(step));
}

// ---------------------------------------------------------------------------------------------------------------
// recording conversions: convert as common.h does, and write down what was read

RecordingValue RecordingInfo::operator[](size_t i) const {
  if (i >= args.size()) throw std::logic_error("capture: an op read argument " + std::to_string(i) + " (at most 12)");
  return RecordingValue{info[i], &args[i], recorder};
}

using Kind = RecordedArg::Kind;

bool isNullish(const RecordingValue& v) { return v.arg->nullish = isNullish(v.value); }
const at::Tensor& unwrap(const RecordingValue& v, const char* what) {
  const at::Tensor& t = unwrap(v.value, what);
  v.arg->kind = Kind::Tensor;
  v.arg->ref = v.recorder->refOf(t);
  return t;
}
std::optional<at::Tensor> unwrapOptional(const RecordingValue& v) {
  if (isNullish(v)) return std::nullopt;
  return unwrap(v);
}
int64_t toInt(const RecordingValue& v) {
  v.arg->integer = toInt(v.value);
  v.arg->kind = Kind::Int;
  return v.arg->integer;
}
double toDouble(const RecordingValue& v) {
  v.arg->number = toDouble(v.value);
  v.arg->kind = Kind::Double;
  return v.arg->number;
}
bool toBool(const RecordingValue& v) {
  v.arg->integer = toBool(v.value) ? 1 : 0;
  v.arg->kind = Kind::Bool;
  return v.arg->integer != 0;
}
std::optional<double> optionalDouble(const RecordingValue& v) {
  if (isNullish(v)) return std::nullopt;
  return toDouble(v);
}
std::vector<int64_t> intList(const RecordingValue& v) {
  v.arg->ints = intList(v.value);
  v.arg->kind = Kind::IntList;
  return v.arg->ints;
}
std::optional<std::vector<int64_t>> optionalIntList(const RecordingValue& v) {
  if (isNullish(v)) return std::nullopt;
  return intList(v);
}
at::Scalar toScalar(const RecordingValue& v) {
  v.arg->scalar = toScalar(v.value);
  v.arg->kind = Kind::Scalar;
  return v.arg->scalar;
}
std::optional<at::Scalar> optionalScalar(const RecordingValue& v) {
  if (isNullish(v)) return std::nullopt;
  return toScalar(v);
}
at::ScalarType toDtype(const RecordingValue& v) {
  v.arg->dtype = toDtype(v.value);
  v.arg->kind = Kind::Dtype;
  return v.arg->dtype;
}
std::optional<at::ScalarType> optionalDtype(const RecordingValue& v) {
  if (isNullish(v)) return std::nullopt;
  return toDtype(v);
}
c10::Device toDevice(const RecordingValue& v) {
  v.arg->device = toDevice(v.value);
  v.arg->kind = Kind::Device;
  return v.arg->device;
}
std::optional<at::Generator> optionalGenerator(const RecordingValue& v) {
  if (isNullish(v)) return std::nullopt;
  v.arg->generator = optionalGenerator(v.value);
  v.arg->kind = Kind::Generator;
  return v.arg->generator;
}
static at::Tensor wrappedScalar(const at::Scalar& s) {
  at::Tensor t = c10::scalar_to_tensor(s);
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}
at::Tensor tensorOrScalar(const RecordingValue& v) {
  if (v.IsArray()) return wrappedScalar(toScalar(boxedScalar(v)));
  return unwrap(v);
}
RecordingValue boxedScalar(const RecordingValue& v) { return RecordingValue{boxedScalar(v.value), v.arg, v.recorder}; }
std::vector<at::Tensor> tensorList(const RecordingValue& v) {
  std::vector<at::Tensor> tensors = tensorList(v.value);
  v.arg->kind = Kind::Tensors;
  v.arg->refs.clear();
  for (const at::Tensor& t : tensors) v.arg->refs.push_back(v.recorder->refOf(t));
  return tensors;
}
c10::List<std::optional<at::Tensor>> indexList(const RecordingValue& v) {
  if (!v.value.IsArray()) throw Napi::TypeError::New(v.Env(), "expected an array of index tensors or null");
  Napi::Array array = v.value.As<Napi::Array>();
  c10::List<std::optional<at::Tensor>> out;
  v.arg->kind = Kind::Tensors;
  v.arg->refs.clear();
  for (uint32_t i = 0; i < array.Length(); ++i) {
    std::optional<at::Tensor> t = unwrapOptional(array.Get(i));
    v.arg->refs.push_back(t ? v.recorder->refOf(*t) : -1);
    out.push_back(std::move(t));
  }
  return out;
}
std::string toText(const RecordingValue& v) {
  v.arg->text = toText(v.value);
  v.arg->kind = Kind::String;
  return v.arg->text;
}

// ---------------------------------------------------------------------------------------------------------------
// replay conversions: answer from the record

ReplayValue ReplayInfo::operator[](size_t i) const {
  static const RecordedArg unread;
  return ReplayValue{i < count ? &args[i] : &unread, table};
}

static const RecordedArg& expect(const ReplayValue& v, Kind kind) {
  if (v.arg->kind != kind) throw std::logic_error("capture: a replayed op read an argument unlike when it was recorded");
  return *v.arg;
}

bool isNullish(const ReplayValue& v) { return v.arg->nullish; }
const at::Tensor& unwrap(const ReplayValue& v, const char*) { return (*v.table)[expect(v, Kind::Tensor).ref]; }
std::optional<at::Tensor> unwrapOptional(const ReplayValue& v) {
  if (v.arg->nullish) return std::nullopt;
  return unwrap(v);
}
int64_t toInt(const ReplayValue& v) { return expect(v, Kind::Int).integer; }
double toDouble(const ReplayValue& v) { return expect(v, Kind::Double).number; }
bool toBool(const ReplayValue& v) { return expect(v, Kind::Bool).integer != 0; }
std::optional<double> optionalDouble(const ReplayValue& v) {
  if (v.arg->nullish) return std::nullopt;
  return toDouble(v);
}
std::vector<int64_t> intList(const ReplayValue& v) { return expect(v, Kind::IntList).ints; }
std::optional<std::vector<int64_t>> optionalIntList(const ReplayValue& v) {
  if (v.arg->nullish) return std::nullopt;
  return intList(v);
}
at::Scalar toScalar(const ReplayValue& v) { return expect(v, Kind::Scalar).scalar; }
std::optional<at::Scalar> optionalScalar(const ReplayValue& v) {
  if (v.arg->nullish) return std::nullopt;
  return toScalar(v);
}
at::ScalarType toDtype(const ReplayValue& v) { return expect(v, Kind::Dtype).dtype; }
std::optional<at::ScalarType> optionalDtype(const ReplayValue& v) {
  if (v.arg->nullish) return std::nullopt;
  return toDtype(v);
}
c10::Device toDevice(const ReplayValue& v) { return expect(v, Kind::Device).device; }
std::optional<at::Generator> optionalGenerator(const ReplayValue& v) {
  if (v.arg->nullish) return std::nullopt;
  return expect(v, Kind::Generator).generator;
}
at::Tensor tensorOrScalar(const ReplayValue& v) {
  if (v.arg->array) return wrappedScalar(toScalar(v));
  return unwrap(v);
}
ReplayValue boxedScalar(const ReplayValue& v) { return v; }
std::vector<at::Tensor> tensorList(const ReplayValue& v) {
  const RecordedArg& arg = expect(v, Kind::Tensors);
  std::vector<at::Tensor> out;
  out.reserve(arg.refs.size());
  for (int32_t ref : arg.refs) out.push_back((*v.table)[ref]);
  return out;
}
c10::List<std::optional<at::Tensor>> indexList(const ReplayValue& v) {
  const RecordedArg& arg = expect(v, Kind::Tensors);
  c10::List<std::optional<at::Tensor>> out;
  out.reserve(arg.refs.size());
  for (int32_t ref : arg.refs) out.push_back(ref < 0 ? std::optional<at::Tensor>() : (*v.table)[ref]);
  return out;
}
std::string toText(const ReplayValue& v) { return expect(v, Kind::String).text; }

std::string toText(const Napi::Value& value) {
  if (!value.IsString()) throw Napi::TypeError::New(value.Env(), "expected a string, got " + describe(value));
  return value.As<Napi::String>().Utf8Value();
}

// ---------------------------------------------------------------------------------------------------------------
// programs: a finished capture

// Fills each step's `release`: the values (inputs and results; not constants, not what the program returns) whose
// last reader it is, or that it produced and nothing reads. A replay drops them there instead of at its end: the allocator
// hands their memory (still in cache) to the next results, and a step's peak memory is what it needs at once rather
// than every intermediate it makes (test/torch/capture.test.ts measures it).
static void planReleases(std::vector<Step>& steps, const std::vector<bool>& constant, const std::vector<int32_t>& outputs) {
  std::vector<int64_t> lastUse(constant.size(), -1);
  for (size_t i = 0; i < steps.size(); ++i) {
    for (const RecordedArg& arg : steps[i].args) {
      if (arg.kind == RecordedArg::Kind::Tensor && arg.ref >= 0) lastUse[arg.ref] = static_cast<int64_t>(i);
      if (arg.kind == RecordedArg::Kind::Tensors)
        for (int32_t ref : arg.refs)
          if (ref >= 0) lastUse[ref] = static_cast<int64_t>(i);
    }
    for (int32_t slot : steps[i].outputs) lastUse[slot] = std::max(lastUse[slot], static_cast<int64_t>(i));
  }
  std::vector<bool> kept(constant);
  for (int32_t slot : outputs) kept[slot] = true;
  for (size_t slot = 0; slot < lastUse.size(); ++slot)
    if (!kept[slot] && lastUse[slot] >= 0) steps[lastUse[slot]].release.push_back(static_cast<int32_t>(slot));
}

struct Program {
  std::vector<Step> steps;
  std::vector<at::Tensor> table;  // constants stay; inputs and results are filled by a replay, dropped after their
                                  // last reader (Step::release) and cleared after it
  std::vector<bool> constant;
  std::vector<InputLayout> inputs;
  std::vector<int32_t> outputs;
  bool gradEnabled = false;
  bool released = false;
  bool running = false;
  // CUDA graph (cuda_graph.cpp): Off (not asked for, or refused: graphReason says why), Pending (recorded at the next
  // replay), Ready (replays launch it), Failed (recording failed: graphReason; replays run op by op)
  enum class Graph : uint8_t { Off, Pending, Ready, Failed } graphState = Graph::Off;
  std::string graphReason;
  c10::Device graphDevice{c10::kCPU};  // the CUDA device of its inputs and outputs (when graphState is not Off)
  std::unique_ptr<StepGraph> graph;
};

static const char* graphStateName(Program::Graph state) {
  switch (state) {
    case Program::Graph::Off:
      return "off";
    case Program::Graph::Pending:
      return "pending";
    case Program::Graph::Ready:
      return "ready";
    case Program::Graph::Failed:
      return "failed";
  }
  return "off";
}

// Why a captured step cannot become a CUDA graph ("" when it can, and then its device is set): the addon, autograd,
// devices, input layouts.
static std::string graphRefusal(Program& program, const std::vector<at::Tensor>& inputs,
                                const std::vector<at::Tensor>& outputs) {
  if (const char* unavailable = cudaGraphsUnavailable()) return unavailable;
  if (program.gradEnabled) return "the step was captured with gradients enabled (a CUDA graph replays no autograd)";
  std::optional<c10::Device> device;
  auto onDevice = [&](const c10::Device& d, const std::string& what) -> std::string {
    if (!d.is_cuda()) return what + " is on " + d.str() + "; a CUDA graph needs every input and output on one CUDA device";
    if (device && *device != d) return what + " is on " + d.str() + ", an earlier one on " + device->str();
    device = d;
    return "";
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string why = onDevice(inputs[i].device(), "input " + std::to_string(i));
    if (!why.empty()) return why;
    // a graph reads a static copy of each input, made with the input's strides
    if (!inputs[i].is_non_overlapping_and_dense())
      return "input " + std::to_string(i) + " has overlapping or gapped strides " + c10::str(inputs[i].strides()) +
             " (a CUDA graph copies its inputs into static tensors of the same layout)";
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::string why = onDevice(outputs[i].device(), "output " + std::to_string(i));
    if (!why.empty()) return why;
  }
  if (!device) return "the step has no inputs or outputs on a CUDA device";
  program.graphDevice = *device;
  return "";
}

constexpr napi_type_tag kProgramTag = {0x7472742d63617074ULL, 0x7572652d70726f67ULL};

static Program* programOf(const Napi::Value& value) {
  if (!value.IsExternal() || !value.As<Napi::External<Program>>().CheckTypeTag(&kProgramTag))
    throw Napi::TypeError::New(value.Env(), "expected a captured step (from captureEnd), got " + describe(value));
  return value.As<Napi::External<Program>>().Data();
}

static std::string layoutText(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, at::ScalarType dtype,
                              const c10::Device& device) {
  return "shape " + c10::str(c10::IntArrayRef(sizes)) + " strides " + c10::str(c10::IntArrayRef(strides)) + " " + c10::toString(dtype) + " on " +
         device.str();
}

// Sets a result's graph and graphReason fields from a program.
static void setGraphFields(Napi::Object result, const Program& program) {
  Napi::Env env = result.Env();
  result.Set("graph", graphStateName(program.graphState));
  result.Set("graphReason", program.graphReason.empty() ? env.Null() : Napi::String::New(env, program.graphReason));
}

// captureBegin(inputs: handles): opens a capture on this thread; the inputs are what each replay binds anew.
static Napi::Value captureBegin(const Napi::CallbackInfo& info) {
  if (openRecorder != nullptr)
    throw Napi::Error::New(info.Env(), "capture: a capture is already open on this thread (captures do not nest)");
  std::vector<at::Tensor> inputs = tensorList(info[0]);
  auto recorder = std::make_unique<Recorder>();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    if (recorder->slotOf.count(t.unsafeGetTensorImpl()))
      throw Napi::Error::New(info.Env(), "capture: input " + std::to_string(i) + " is the same tensor as an earlier input");
    recorder->newSlot(t, false);
    recorder->inputs.push_back({t.sizes().vec(), t.strides().vec(), t.scalar_type(), t.device()});
  }
  recorder->gradEnabled = c10::GradMode::is_enabled();
  openRecorder = recorder.release();
  return info.Env().Undefined();
}

// captureAbort(): closes this thread's open capture, if any, and drops what it recorded.
static Napi::Value captureAbort(const Napi::CallbackInfo& info) {
  delete openRecorder;
  openRecorder = nullptr;
  return info.Env().Undefined();
}

// captureEnd(outputs: handles, cudaGraph?: boolean) -> {step: program | null, reason: string | null, ops, graph,
// graphReason}: closes the capture. A program replays the recorded ops; null (with the reason) when a binding that
// cannot be replayed ran. With cudaGraph, a step on one CUDA device is recorded as a CUDA graph at its first replay
// (graph "pending"); graph "off" with graphReason when it cannot be.
static Napi::Value captureEnd(const Napi::CallbackInfo& info) {
  if (openRecorder == nullptr) throw Napi::Error::New(info.Env(), "capture: no capture is open on this thread");
  std::unique_ptr<Recorder> recorder(openRecorder);
  openRecorder = nullptr;
  std::vector<at::Tensor> outputs = tensorList(info[0]);
  Napi::Object result = Napi::Object::New(info.Env());
  result.Set("ops", Napi::Number::New(info.Env(), static_cast<double>(recorder->steps.size())));
  if (recorder->poisonedBy != nullptr) {
    result.Set("step", info.Env().Null());
    result.Set("reason", bindingName(recorder->poisonedBy) + " ran inside the captured step");
    return result;
  }
  auto program = std::make_unique<Program>();
  for (const at::Tensor& t : outputs) program->outputs.push_back(recorder->refOf(t));
  program->steps = std::move(recorder->steps);
  program->constant = recorder->constant;
  planReleases(program->steps, program->constant, program->outputs);
  program->table.resize(recorder->values.size());
  for (size_t i = 0; i < recorder->values.size(); ++i)
    if (recorder->constant[i]) program->table[i] = recorder->values[i];
  program->inputs = std::move(recorder->inputs);
  program->gradEnabled = recorder->gradEnabled;
  if (info.Length() > 1 && !isNullish(info[1]) && toBool(info[1])) {
    std::vector<at::Tensor> inputs(recorder->values.begin(), recorder->values.begin() + program->inputs.size());
    program->graphReason = graphRefusal(*program, inputs, outputs);
    if (program->graphReason.empty()) program->graphState = Program::Graph::Pending;
  }
  auto constants = std::count(program->constant.begin(), program->constant.end(), true);
  Napi::External<Program> external = Napi::External<Program>::New(
      info.Env(), program.release(), [](Napi::BasicEnv, Program* p) { delete p; });
  external.TypeTag(&kProgramTag);
  result.Set("step", external);
  result.Set("reason", info.Env().Null());
  setGraphFields(result, *external.Data());
  result.Set("constants", Napi::Number::New(info.Env(), static_cast<double>(constants)));
  return result;
}

// Clears a replay's inputs and results from the table, and restores grad mode, however the replay ends.
struct ReplayScope {
  Program& program;
  bool grad;
  explicit ReplayScope(Program& p) : program(p), grad(c10::GradMode::is_enabled()) {
    program.running = true;
    c10::GradMode::set_enabled(program.gradEnabled);
  }
  ~ReplayScope() {
    for (size_t i = 0; i < program.table.size(); ++i)
      if (!program.constant[i]) program.table[i].reset();
    c10::GradMode::set_enabled(grad);
    program.running = false;
  }
};

// replayCapture(step, inputs: handles) -> handles: the recorded ops over new inputs, in one native call.
static Napi::Value replayCapture(const Napi::CallbackInfo& info) {
  RECORD_FUNCTION("trinity::replay", std::vector<c10::IValue>());  // a span around the replayed ops in a profile
  Program& program = *programOf(info[0]);
  if (program.released) throw Napi::Error::New(info.Env(), "replay: the captured step was released");
  if (program.running) throw Napi::Error::New(info.Env(), "replay: the captured step is already running");
  std::vector<at::Tensor> inputs = tensorList(info[1]);
  if (inputs.size() != program.inputs.size())
    throw Napi::RangeError::New(info.Env(), "replay: " + std::to_string(inputs.size()) + " inputs, the step was captured with " +
                                                std::to_string(program.inputs.size()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputLayout& want = program.inputs[i];
    const at::Tensor& t = inputs[i];
    if (t.sizes() != c10::IntArrayRef(want.sizes) || t.strides() != c10::IntArrayRef(want.strides) ||
        t.scalar_type() != want.dtype || t.device() != want.device)
      throw Napi::RangeError::New(info.Env(), "replay: input " + std::to_string(i) + " has " +
                                                  layoutText(t.sizes().vec(), t.strides().vec(), t.scalar_type(), t.device()) +
                                                  ", the step was captured with " +
                                                  layoutText(want.sizes, want.strides, want.dtype, want.device));
  }
  std::vector<at::Tensor> results;
  {
    ReplayScope scope(program);
    // the recorded ops over `bound`, op by op; the table keeps only the constants afterwards
    StepRunner runOps = [&program](const std::vector<at::Tensor>& bound) {
      for (size_t i = 0; i < bound.size(); ++i) program.table[i] = bound[i];
      std::vector<at::Tensor> outputs;
      for (const Step& step : program.steps) {
        outputs.clear();
        step.fn(ReplayInfo{step.args.data(), step.args.size(), &program.table}, outputs);
        if (outputs.size() != step.outputs.size())
          throw std::logic_error(std::string("replay: ") + step.name + " returned " + std::to_string(outputs.size()) +
                                 " tensors, " + std::to_string(step.outputs.size()) + " when captured");
        for (size_t k = 0; k < outputs.size(); ++k) program.table[step.outputs[k]] = std::move(outputs[k]);
        for (int32_t slot : step.release) program.table[slot].reset();
      }
      std::vector<at::Tensor> out;
      for (int32_t slot : program.outputs) out.push_back(program.table[slot]);
      for (size_t i = 0; i < program.table.size(); ++i)
        if (!program.constant[i]) program.table[i].reset();
      return out;
    };
    if (program.graphState == Program::Graph::Ready) {
      results = program.graph->replay(inputs);
    } else if (program.graphState == Program::Graph::Pending) {
      // the step runs once eagerly (its outputs are this call's result), then is recorded as a graph; an eager run
      // that fails throws as a replay would, a recording that fails leaves the step replaying op by op
      try {
        program.graph = recordStepGraph(program.graphDevice, inputs, runOps, results);
        program.graphState = Program::Graph::Ready;
      } catch (const GraphCaptureFailed& failure) {
        program.graphState = Program::Graph::Failed;
        program.graphReason = failure.what();
      }
    } else {
      results = runOps(inputs);
    }
  }
  return wrapList(info.Env(), results);
}

// captureGraphState(step) -> {graph: 'off' | 'pending' | 'ready' | 'failed', graphReason: string | null}
static Napi::Value captureGraphState(const Napi::CallbackInfo& info) {
  Program& program = *programOf(info[0]);
  Napi::Object result = Napi::Object::New(info.Env());
  setGraphFields(result, program);
  return result;
}

// releaseCapture(step): frees the step's record and constants now (otherwise when the GC collects it).
static Napi::Value releaseCapture(const Napi::CallbackInfo& info) {
  Program& program = *programOf(info[0]);
  if (program.running) throw Napi::Error::New(info.Env(), "releaseCapture: the captured step is running");
  program.released = true;
  program.graph.reset();
  program.steps.clear();
  program.table.clear();
  program.constant.clear();
  return info.Env().Undefined();
}

static Napi::Value nativeCallCount(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(nativeCalls));
}

void registerCapture(Napi::Object exports) {
  TRT_EXPORT_PASSIVE(exports, "captureBegin", captureBegin);
  TRT_EXPORT_PASSIVE(exports, "captureEnd", captureEnd);
  TRT_EXPORT_PASSIVE(exports, "captureAbort", captureAbort);
  TRT_EXPORT(exports, "replayCapture", replayCapture);
  TRT_EXPORT(exports, "releaseCapture", releaseCapture);
  TRT_EXPORT_PASSIVE(exports, "captureGraphState", captureGraphState);
  TRT_EXPORT_PASSIVE(exports, "nativeCallCount", nativeCallCount);
}

}  // namespace trt
