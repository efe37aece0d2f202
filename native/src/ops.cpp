// The op table: each entry converts its arguments, calls one ATen function and wraps the result.
// Argument shorthands: T(i) tensor, TS(i) tensor or boxed number [v], OT(i) optional tensor, I(i) integer, D(i) double,
// B(i) boolean, S(i) scalar, OS(i) optional scalar, L(i) integer list, OL(i) optional integer list,
// OD(i) optional double, DT(i) optional dtype, G(i) optional generator, TL(i) tensor list.
// The TypeScript side (src/torch/tensor.ts, src/torch/functional.ts) documents each op for users.
#include "capture.h"

#include <ATen/SDPBackend.h>

#include <array>

namespace trt {

#define T(i) unwrap(info[i])
#define TS(i) tensorOrScalar(info[i])
#define OT(i) unwrapOptional(info[i])
#define I(i) toInt(info[i])
#define D(i) toDouble(info[i])
#define B(i) toBool(info[i])
#define S(i) toScalar(info[i])
#define OS(i) optionalScalar(info[i])
#define L(i) intList(info[i])
#define OL(i) optionalIntList(info[i])
#define OD(i) optionalDouble(info[i])
#define DT(i) optionalDtype(info[i])
#define G(i) optionalGenerator(info[i])
#define TL(i) tensorList(info[i])

static at::OptionalIntArrayRef optionalDims(const std::optional<std::vector<int64_t>>& dims) {
  if (!dims) return std::nullopt;
  return at::IntArrayRef(*dims);
}

// Ops that return one tensor.
#define TENSOR_OPS(X)                                                                                      \
  /* elementwise arithmetic; the second operand may be a number */                                        \
  X(add, at::add(T(0), TS(1), isNullish(info[2]) ? at::Scalar(1) : S(2)))                                 \
  X(sub, at::sub(T(0), TS(1), isNullish(info[2]) ? at::Scalar(1) : S(2)))                                 \
  X(mul, at::mul(T(0), TS(1)))                                                                             \
  X(div, at::div(T(0), TS(1)))                                                                             \
  X(pow, info[1].IsArray() ? at::pow(T(0), toScalar(boxedScalar(info[1]))) : at::pow(T(0), T(1)))                                  \
  X(minimum, at::minimum(T(0), TS(1)))                                                                     \
  X(maximum, at::maximum(T(0), TS(1)))                                                                     \
  X(eq, at::eq(T(0), TS(1)))                                                                               \
  X(ne, at::ne(T(0), TS(1)))                                                                               \
  X(lt, at::lt(T(0), TS(1)))                                                                               \
  X(le, at::le(T(0), TS(1)))                                                                               \
  X(gt, at::gt(T(0), TS(1)))                                                                               \
  X(ge, at::ge(T(0), TS(1)))                                                                               \
  X(logicalAnd, at::logical_and(T(0), T(1)))                                                               \
  X(logicalOr, at::logical_or(T(0), T(1)))                                                                 \
  X(logicalXor, at::logical_xor(T(0), T(1)))                                                               \
  X(logicalNot, at::logical_not(T(0)))                                                                     \
  X(clamp, at::clamp(T(0), OS(1), OS(2)))                                                                  \
  X(where, at::where(T(0), TS(1), TS(2)))                                                                  \
  X(lerp, at::lerp(T(0), T(1), TS(2)))                                                                     \
  /* unary math */                                                                                         \
  X(neg, at::neg(T(0)))                                                                                    \
  X(abs, at::abs(T(0)))                                                                                    \
  X(exp, at::exp(T(0)))                                                                                    \
  X(log, at::log(T(0)))                                                                                    \
  X(log1p, at::log1p(T(0)))                                                                                \
  X(expm1, at::expm1(T(0)))                                                                                \
  X(sqrt, at::sqrt(T(0)))                                                                                  \
  X(rsqrt, at::rsqrt(T(0)))                                                                                \
  X(square, at::square(T(0)))                                                                              \
  X(reciprocal, at::reciprocal(T(0)))                                                                      \
  X(sign, at::sign(T(0)))                                                                                  \
  X(sin, at::sin(T(0)))                                                                                    \
  X(cos, at::cos(T(0)))                                                                                    \
  X(floor, at::floor(T(0)))                                                                                \
  X(ceil, at::ceil(T(0)))                                                                                  \
  X(round, at::round(T(0)))                                                                                \
  X(isnan, at::isnan(T(0)))                                                                                \
  X(isinf, at::isinf(T(0)))                                                                                \
  X(isfinite, at::isfinite(T(0)))                                                                          \
  /* activations */                                                                                        \
  X(relu, at::relu(T(0)))                                                                                  \
  X(silu, at::silu(T(0)))                                                                                  \
  X(gelu, at::gelu(T(0), info[1].IsString() ? toText(info[1]) : std::string("none")))           \
  X(tanh, at::tanh(T(0)))                                                                                  \
  X(sigmoid, at::sigmoid(T(0)))                                                                            \
  X(logsigmoid, at::log_sigmoid(T(0)))                                                                     \
  X(softplus, at::softplus(T(0), isNullish(info[1]) ? at::Scalar(1) : S(1),                               \
                           isNullish(info[2]) ? at::Scalar(20) : S(2)))                                    \
  X(softmax, at::softmax(T(0), I(1), DT(2)))                                                               \
  X(logSoftmax, at::log_softmax(T(0), I(1), DT(2)))                                                        \
  X(dropout, at::dropout(T(0), D(1), B(2)))                                                                \
  /* reductions: dims may be null (all) */                                                                 \
  X(sum, at::sum(T(0), optionalDims(OL(1)), B(2), DT(3)))                                                  \
  X(mean, at::mean(T(0), optionalDims(OL(1)), B(2), DT(3)))                                                \
  X(amax, at::amax(T(0), OL(1).value_or(std::vector<int64_t>{}), B(2)))                                    \
  X(amin, at::amin(T(0), OL(1).value_or(std::vector<int64_t>{}), B(2)))                                    \
  X(argmax, at::argmax(T(0), isNullish(info[1]) ? std::optional<int64_t>() : I(1), B(2)))                  \
  X(argmin, at::argmin(T(0), isNullish(info[1]) ? std::optional<int64_t>() : I(1), B(2)))                  \
  X(logsumexp, at::logsumexp(T(0), L(1), B(2)))                                                            \
  X(norm, at::linalg_vector_norm(T(0), S(1), optionalDims(OL(2)), B(3), DT(4)))                            \
  X(var, at::var(T(0), optionalDims(OL(1)), OS(2), B(3)))                                                  \
  X(all, isNullish(info[1]) ? at::all(T(0)) : at::all(T(0), I(1), B(2)))                                   \
  X(any, isNullish(info[1]) ? at::any(T(0)) : at::any(T(0), I(1), B(2)))                                   \
  X(cumsum, at::cumsum(T(0), I(1), DT(2)))                                                                 \
  X(cumprod, at::cumprod(T(0), I(1), DT(2)))                                                               \
  /* linear algebra and layers */                                                                          \
  X(matmul, productMatmul(T(0), T(1)))                                                                     \
  X(mm, productMm(T(0), T(1)))                                                                             \
  X(bmm, productBmm(T(0), T(1)))                                                                           \
  X(linear, productLinear(T(0), T(1), OT(2)))                                                              \
  X(embedding, at::embedding(T(0), T(1)))                                                                  \
  X(rmsNorm, at::rms_norm(T(0), L(1), OT(2), OD(3)))                                                       \
  X(layerNorm, at::layer_norm(T(0), L(1), OT(2), OT(3), D(4)))                                             \
  /* scaledDotProductAttention(q, k, v, mask?, dropout, causal, scale?, gqa) */                            \
  X(scaledDotProductAttention, at::scaled_dot_product_attention(T(0), T(1), T(2), OT(3), D(4), B(5), OD(6), B(7))) \
  /* crossEntropy(logits[N,C], target[N], ignoreIndex, reduction 0 none 1 mean 2 sum, labelSmoothing) */   \
  X(crossEntropy, at::cross_entropy_loss(T(0), T(1), std::nullopt, I(3), I(2), D(4)))                       \
  X(einsum, at::einsum(toText(info[0]), TL(1)))                                     \
  X(outer, at::outer(T(0), T(1)))                                                                          \
  /* indexing */                                                                                           \
  X(gather, at::gather(T(0), I(1), T(2)))                                                                  \
  X(scatter, info[3].IsArray() ? at::scatter(T(0), I(1), T(2), toScalar(boxedScalar(info[3]))) : at::scatter(T(0), I(1), T(2), T(3))) \
  X(scatterAdd, at::scatter_add(T(0), I(1), T(2), T(3)))                                                   \
  X(indexSelect, at::index_select(T(0), I(1), T(2)))                                                       \
  X(maskedFill, info[2].IsArray() ? at::masked_fill(T(0), T(1), toScalar(boxedScalar(info[2]))) : at::masked_fill(T(0), T(1), T(2))) \
  X(maskedSelect, at::masked_select(T(0), T(1)))                                                           \
  X(nonzero, at::nonzero(T(0)))                                                                            \
  X(tril, at::tril(T(0), I(1)))                                                                            \
  X(triu, at::triu(T(0), I(1)))                                                                            \
  X(multinomial, at::multinomial(T(0), I(1), B(2), G(3)))                                                  \
  X(argsort, at::argsort(T(0), B(3), I(1), B(2)))                                                          \
  /* shape and layout */                                                                                   \
  X(cat, at::cat(TL(0), I(1)))                                                                             \
  X(stack, at::stack(TL(0), I(1)))                                                                         \
  X(reshape, at::reshape(T(0), L(1)))                                                                      \
  X(view, T(0).view(L(1)))                                                                                 \
  X(transpose, at::transpose(T(0), I(1), I(2)))                                                            \
  X(permute, at::permute(T(0), L(1)))                                                                      \
  X(contiguous, T(0).contiguous())                                                                         \
  X(unsqueeze, at::unsqueeze(T(0), I(1)))                                                                  \
  X(squeeze, isNullish(info[1]) ? at::squeeze(T(0)) : at::squeeze(T(0), at::IntArrayRef(L(1))))          \
  X(expand, T(0).expand(L(1)))                                                                             \
  X(narrow, at::narrow(T(0), I(1), I(2), I(3)))                                                            \
  X(slice, at::slice(T(0), I(1), isNullish(info[2]) ? std::optional<int64_t>() : I(2),                    \
                     isNullish(info[3]) ? std::optional<int64_t>() : I(3), I(4)))                          \
  X(select, at::select(T(0), I(1), I(2)))                                                                  \
  X(flatten, at::flatten(T(0), I(1), I(2)))                                                                \
  X(repeat, T(0).repeat(L(1)))                                                                             \
  X(repeatInterleave, at::repeat_interleave(T(0), I(1), I(2)))                                             \
  X(flip, at::flip(T(0), L(1)))                                                                            \
  X(roll, at::roll(T(0), L(1), L(2)))                                                                      \
  X(pad, at::constant_pad_nd(T(0), L(1), S(2)))                                                            \
  X(index, T(0).index(indexList(info[1])))                                                                 \
  /* conversion and autograd plumbing */                                                                   \
  X(to, T(0).to(isNullish(info[2]) ? T(0).device() : toDevice(info[2]),                                   \
                DT(1).value_or(T(0).scalar_type()), B(3), B(4)))                                           \
  X(clone, at::clone(T(0)))                                                                                \
  X(detach, T(0).detach())                                                                                 \
  X(alias, T(0))                                                                                           \
  X(emptyLike, at::empty_like(T(0)))                                                                       \
  X(zerosLike, at::zeros_like(T(0)))                                                                       \
  X(onesLike, at::ones_like(T(0)))                                                                         \
  X(fullLike, at::full_like(T(0), S(1)))

// Ops that return a pair of tensors (values, indices).
#define PAIR_OPS(X)                                                      \
  X(maxDim, at::max(T(0), I(1), B(2)))                                   \
  X(minDim, at::min(T(0), I(1), B(2)))                                   \
  X(topk, at::topk(T(0), I(1), I(2), B(3), B(4)))                        \
  X(sort, at::sort(T(0), B(3), I(1), B(2)))

// Ops that return a list of tensors.
#define LIST_OPS(X)                                                                                   \
  X(split, info[1].IsArray() ? at::split_with_sizes(T(0), L(1), I(2)) : at::split(T(0), I(1), I(2))) \
  X(chunk, at::chunk(T(0), I(1), I(2)))                                                                \
  X(unbind, at::unbind(T(0), I(1)))

// In-place ops: they mutate their first argument and return nothing (the TS side returns `this`).
#define INPLACE_OPS(X)                                                                    \
  X(copy_, T(0).copy_(T(1)))                                                              \
  X(add_, T(0).add_(TS(1), isNullish(info[2]) ? at::Scalar(1) : S(2)))                    \
  X(sub_, T(0).sub_(TS(1), isNullish(info[2]) ? at::Scalar(1) : S(2)))                    \
  X(mul_, T(0).mul_(TS(1)))                                                               \
  X(div_, T(0).div_(TS(1)))                                                               \
  X(zero_, T(0).zero_())                                                                  \
  X(fill_, T(0).fill_(S(1)))                                                              \
  X(clamp_, T(0).clamp_(OS(1), OS(2)))                                                    \
  X(maskedFill_, T(0).masked_fill_(T(1), S(2)))                                           \
  X(indexCopy_, T(0).index_copy_(I(1), T(2), T(3)))                                       \
  X(indexPut_, T(0).index_put_(indexList(info[1]), T(2), B(3)))                           \
  X(addcmul_, T(0).addcmul_(T(1), T(2), S(3)))                                            \
  X(lerp_, T(0).lerp_(T(1), TS(2)))

// index lists for advanced indexing: an array whose entries are tensors or null (":")
static c10::List<std::optional<at::Tensor>> indexList(const Napi::Value& value) {
  if (!value.IsArray()) throw Napi::TypeError::New(value.Env(), "expected an array of index tensors or null");
  Napi::Array array = value.As<Napi::Array>();
  c10::List<std::optional<at::Tensor>> out;
  out.reserve(array.Length());
  for (uint32_t i = 0; i < array.Length(); ++i) out.push_back(unwrapOptional(array.Get(i)));
  return out;
}

// Each op is one expression over `info`, compiled three times (capture.h): over the JS arguments (eager), over
// recording arguments (while a capture is open on this thread) and over a record (replay).
#define DEFINE_TENSOR_OP(name, expr)                                                                    \
  template <class Info>                                                                                 \
  static at::Tensor name##Op(const Info& info) {                                                        \
    return expr;                                                                                        \
  }                                                                                                     \
  TRT_ONE_TENSOR_BINDING(name, name##Op)
#define DEFINE_PAIR_OP(name, expr)                                                       \
  template <class Info>                                                                  \
  static std::tuple<at::Tensor, at::Tensor> name##Op(const Info& info) {                 \
    return expr;                                                                         \
  }                                                                                      \
  static void name##Replay(const ReplayInfo& info, std::vector<at::Tensor>& out) {       \
    auto pair = name##Op(info);                                                          \
    out.push_back(std::get<0>(pair));                                                    \
    out.push_back(std::get<1>(pair));                                                    \
  }                                                                                      \
  TRT_RECORDED_BINDING(name, name##Op, pairOutputs, wrapPair)
#define DEFINE_LIST_OP(name, expr)                                                       \
  template <class Info>                                                                  \
  static std::vector<at::Tensor> name##Op(const Info& info) {                            \
    return expr;                                                                         \
  }                                                                                      \
  static void name##Replay(const ReplayInfo& info, std::vector<at::Tensor>& out) { out = name##Op(info); } \
  TRT_RECORDED_BINDING(name, name##Op, listOutputs, wrapList)
// in-place ops return their first argument's tensor so that the shared binding shape applies; the JS gets undefined
#define DEFINE_INPLACE_OP(name, expr)                                                          \
  template <class Info>                                                                        \
  static bool name##Op(const Info& info) {                                                     \
    expr;                                                                                      \
    return true;                                                                               \
  }                                                                                            \
  static void name##Replay(const ReplayInfo& info, std::vector<at::Tensor>&) { name##Op(info); } \
  TRT_RECORDED_BINDING(name, name##Op, noOutputs, undefinedResult)

TENSOR_OPS(DEFINE_TENSOR_OP)
PAIR_OPS(DEFINE_PAIR_OP)
LIST_OPS(DEFINE_LIST_OP)
INPLACE_OPS(DEFINE_INPLACE_OP)

// sdpBackend(q, k, v, mask?, causal, gqa): the kernel libtorch's scaled_dot_product_attention would pick for these
// arguments ('flash', 'efficient', 'cudnn', 'math', 'overrideable'; libtorch's error when none is left on), by its
// own rules for the device, dtype, shapes and mask (at::_fused_sdp_choice). The model asks it before grouped-query
// attention, because a backend that admits no grouped heads leaves the call to the math kernel (../../src/model/
// attention.ts).
static Napi::Value sdpBackend(const Napi::CallbackInfo& info) {
  const int64_t choice = at::_fused_sdp_choice(T(0), T(1), T(2), OT(3), 0.0, B(4), std::nullopt, B(5));
  const char* name = nullptr;
  switch (static_cast<at::SDPBackend>(choice)) {
    case at::SDPBackend::math: name = "math"; break;
    case at::SDPBackend::flash_attention: name = "flash"; break;
    case at::SDPBackend::efficient_attention: name = "efficient"; break;
    case at::SDPBackend::cudnn_attention: name = "cudnn"; break;
    case at::SDPBackend::overrideable: name = "overrideable"; break;
    default: break;
  }
  if (name == nullptr) throw Napi::Error::New(info.Env(), "sdpBackend: libtorch answered backend " + std::to_string(choice));
  return Napi::String::New(info.Env(), name);
}

// setSdpBackendEnabled(name, on) / sdpBackendEnabled(name): libtorch's switches for the attention kernels
// (PyTorch's torch.backends.cuda.enable_flash_sdp and its kin; they apply to the CPU's choice too).
struct SdpSwitch {
  const char* name;
  void (at::Context::*set)(bool);
  bool (at::Context::*get)() const;
};
static const SdpSwitch& sdpSwitch(const Napi::CallbackInfo& info, const char* caller) {
  static const std::array<SdpSwitch, 4> switches{{
      {"flash", &at::Context::setSDPUseFlash, &at::Context::userEnabledFlashSDP},
      {"efficient", &at::Context::setSDPUseMemEfficient, &at::Context::userEnabledMemEfficientSDP},
      {"math", &at::Context::setSDPUseMath, &at::Context::userEnabledMathSDP},
      {"cudnn", &at::Context::setSDPUseCuDNN, &at::Context::userEnabledCuDNNSDP},
  }};
  const std::string name = toText(info[0]);
  for (const auto& s : switches)
    if (name == s.name) return s;
  throw Napi::RangeError::New(info.Env(), std::string(caller) + ": expected 'flash', 'efficient', 'math' or 'cudnn', got \"" + name + "\"");
}
static Napi::Value setSdpBackendEnabled(const Napi::CallbackInfo& info) {
  (at::globalContext().*sdpSwitch(info, "setSdpBackendEnabled").set)(B(1));
  return info.Env().Undefined();
}
static Napi::Value sdpBackendEnabled(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), (at::globalContext().*sdpSwitch(info, "sdpBackendEnabled").get)());
}

#define REGISTER_OP(name, expr) TRT_EXPORT_RECORDED(exports, #name, name);

void registerOps(Napi::Object exports) {
  TENSOR_OPS(REGISTER_OP)
  PAIR_OPS(REGISTER_OP)
  LIST_OPS(REGISTER_OP)
  INPLACE_OPS(REGISTER_OP)
  TRT_EXPORT_PASSIVE(exports, "sdpBackend", sdpBackend);
  TRT_EXPORT(exports, "setSdpBackendEnabled", setSdpBackendEnabled);
  TRT_EXPORT_PASSIVE(exports, "sdpBackendEnabled", sdpBackendEnabled);
}

}  // namespace trt
