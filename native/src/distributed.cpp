// Distributed communication over libtorch's own c10d: a TCPStore for rendezvous, a process group over it (Gloo for CPU
// tensors; NCCL for CUDA tensors when the addon was built against a CUDA libtorch with NCCL's headers), and the
// collectives. src/torch/distributed.ts is the API; this file only converts arguments, calls c10d and converts results.
//
// Stores and groups live in process-wide registries under numeric ids, so a group made on one JS thread can be used
// from another (the trainer's worker, say). A collective is issued and waited for on a libuv pool thread (the wait
// lasts until every peer arrived, or the timeout), in the order the JS thread called them, which is the order c10d
// needs on every rank; the call returns a promise. Every failure rejects with c10d's message;
// the TypeScript layer names the collective, the rank and the timeout around it.
#include "common.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#ifdef TRT_HAVE_GLOO
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupWrapper.hpp>
#endif
#ifdef TRT_HAVE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace trt {
namespace {

using Milliseconds = std::chrono::milliseconds;
using WorkList = std::vector<c10::intrusive_ptr<c10d::Work>>;

struct StoreRef {
  c10::intrusive_ptr<c10d::Store> store;
};

// Collectives are issued on pool threads (issuing a checked collective already waits for the peers), strictly in the
// order the JS thread called them: each call takes a ticket on the JS thread, and its pool thread issues when the
// ticket's turn comes. The libuv pool runs work first in, first out, so a ticket only ever waits for earlier ones,
// which are already running.
struct Group {
  c10::intrusive_ptr<c10d::Store> store;  // kept alive as long as the group: Gloo's rendezvous keys live in it
  c10::intrusive_ptr<c10d::Backend> backend;
  std::atomic<uint64_t> nextTicket{0};
  std::mutex turnMutex;
  std::condition_variable turnChanged;
  uint64_t serving = 0;  // under turnMutex

  uint64_t takeTicket() { return nextTicket.fetch_add(1); }
  // Runs `issue` when `ticket`'s turn comes (outside the lock: issuing may wait for the peers), then passes the turn
  // on, also when `issue` throws.
  WorkList issueInTurn(uint64_t ticket, const std::function<WorkList()>& issue) {
    {
      std::unique_lock<std::mutex> lock(turnMutex);
      turnChanged.wait(lock, [&] { return serving == ticket; });
    }
    struct PassTurn {
      Group* group;
      ~PassTurn() {
        {
          std::lock_guard<std::mutex> lock(group->turnMutex);
          group->serving++;
        }
        group->turnChanged.notify_all();
      }
    } passTurn{this};
    return issue();
  }
};

// Ids are never reused. The registries are never destroyed: a group still registered at process exit must not be
// torn down after libtorch's own statics are.
template <typename T>
struct Registry {
  std::mutex mutex;
  std::unordered_map<int64_t, std::shared_ptr<T>> items;
  int64_t nextId = 1;

  int64_t add(std::shared_ptr<T> item) {
    std::lock_guard<std::mutex> lock(mutex);
    int64_t id = nextId++;
    items.emplace(id, std::move(item));
    return id;
  }
  std::shared_ptr<T> get(const Napi::Value& value, const char* what) {
    int64_t id = toInt(value);
    std::lock_guard<std::mutex> lock(mutex);
    auto it = items.find(id);
    if (it == items.end())
      throw Napi::Error::New(value.Env(), std::string(what) + " " + std::to_string(id) + " was destroyed (or never existed)");
    return it->second;
  }
  std::shared_ptr<T> take(const Napi::Value& value) {
    int64_t id = toInt(value);
    std::lock_guard<std::mutex> lock(mutex);
    auto it = items.find(id);
    if (it == items.end()) return nullptr;
    std::shared_ptr<T> item = std::move(it->second);
    items.erase(it);
    return item;
  }
};

Registry<StoreRef>& stores() {
  static auto* registry = new Registry<StoreRef>();
  return *registry;
}
Registry<Group>& groups() {
  static auto* registry = new Registry<Group>();
  return *registry;
}

// A promise settled from a libuv pool thread: `body` runs there (blocking waits belong in it), `result` runs on the JS
// thread afterwards and makes the resolved value (tensor handles must be made there: the table is the JS thread's).
class Pending : public Napi::AsyncWorker {
 public:
  using Body = std::function<void()>;
  using Result = std::function<Napi::Value(Napi::Env)>;

  Pending(Napi::Env env, Body body, Result result)
      : Napi::AsyncWorker(env, "trinity-distributed"),
        deferred_(Napi::Promise::Deferred::New(env)),
        body_(std::move(body)),
        result_(std::move(result)) {}

  static Napi::Value start(Napi::Env env, Body body, Result result = nullptr) {
    auto* pending = new Pending(env, std::move(body), std::move(result));
    Napi::Promise promise = pending->deferred_.Promise();
    pending->Queue();  // the worker deletes itself after OnOK/OnError
    return promise;
  }

 protected:
  void Execute() override {
    try {
      body_();
    } catch (const std::exception& error) {
      SetError(errorMessage(error));
    }
    // What the body held (a destroyed group, say) is released here, off the JS thread: tearing down a process group
    // joins its threads.
    body_ = nullptr;
  }
  void OnOK() override {
    try {
      deferred_.Resolve(result_ ? result_(Env()) : Env().Undefined());
    } catch (const Napi::Error& error) {
      deferred_.Reject(error.Value());
    }
  }
  void OnError(const Napi::Error& error) override { deferred_.Reject(error.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  Body body_;
  Result result_;
};

Milliseconds toTimeout(const Napi::Value& value) {
  int64_t ms = toInt(value);
  if (ms <= 0) throw Napi::RangeError::New(value.Env(), "timeoutMs must be a positive integer, got " + describe(value));
  return Milliseconds(ms);
}

c10d::ReduceOp toReduceOp(const Napi::Value& value) {
  std::string name = value.IsString() ? value.As<Napi::String>().Utf8Value() : "";
  if (name == "sum") return c10d::ReduceOp::SUM;
  if (name == "avg") return c10d::ReduceOp::AVG;
  if (name == "max") return c10d::ReduceOp::MAX;
  if (name == "min") return c10d::ReduceOp::MIN;
  if (name == "product") return c10d::ReduceOp::PRODUCT;
  throw Napi::TypeError::New(value.Env(), "unknown reduce op " + describe(value) + ": expected sum, avg, max, min or product");
}

void waitAll(const WorkList& works) {
  for (const auto& work : works) work->wait();
}

// ---- stores ----

// distStoreCreate(host, port, worldSize, isMaster, timeoutMs) -> Promise<{ id, port }>. The master serves the store
// (port 0: the OS picks one, reported back); every rank, the master included, connects to it as a client, retrying
// until timeoutMs. The master does not wait for the others here: creating the group does (with its own timeout).
Napi::Value distStoreCreate(const Napi::CallbackInfo& info) {
  std::string host = info[0].As<Napi::String>().Utf8Value();
  int64_t port = toInt(info[1]);
  int64_t worldSize = toInt(info[2]);
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(port);
  options.isServer = toBool(info[3]);
  options.numWorkers = static_cast<size_t>(worldSize);
  options.waitWorkers = false;
  options.timeout = toTimeout(info[4]);
  auto store = std::make_shared<c10::intrusive_ptr<c10d::TCPStore>>();
  return Pending::start(
      info.Env(), [host, options, store] { *store = c10::make_intrusive<c10d::TCPStore>(host, options); },
      [store](Napi::Env env) -> Napi::Value {
        Napi::Object out = Napi::Object::New(env);
        out.Set("port", Napi::Number::New(env, (*store)->getPort()));
        out.Set("id", Napi::Number::New(env, static_cast<double>(stores().add(std::make_shared<StoreRef>(StoreRef{*store})))));
        return out;
      });
}

Napi::Value distStoreSet(const Napi::CallbackInfo& info) {
  auto store = stores().get(info[0], "store");
  std::string key = info[1].As<Napi::String>().Utf8Value();
  Napi::Uint8Array bytes = info[2].As<Napi::Uint8Array>();
  std::vector<uint8_t> value(bytes.Data(), bytes.Data() + bytes.ByteLength());
  return Pending::start(info.Env(), [store, key, value] { store->store->set(key, value); });
}

// distStoreGet(store, key, timeoutMs) -> Promise<Uint8Array>: waits until the key is set or the timeout passes.
Napi::Value distStoreGet(const Napi::CallbackInfo& info) {
  auto store = stores().get(info[0], "store");
  std::string key = info[1].As<Napi::String>().Utf8Value();
  Milliseconds timeout = toTimeout(info[2]);
  auto value = std::make_shared<std::vector<uint8_t>>();
  return Pending::start(
      info.Env(),
      [store, key, timeout, value] {
        store->store->wait({key}, timeout);
        *value = store->store->get(key);
      },
      [value](Napi::Env env) -> Napi::Value {
        Napi::Uint8Array out = Napi::Uint8Array::New(env, value->size());
        std::copy(value->begin(), value->end(), out.Data());
        return out;
      });
}

// distStoreAdd(store, key, delta) -> Promise<number>: the counter's value after adding (atomic across ranks).
Napi::Value distStoreAdd(const Napi::CallbackInfo& info) {
  auto store = stores().get(info[0], "store");
  std::string key = info[1].As<Napi::String>().Utf8Value();
  int64_t delta = toInt(info[2]);
  auto value = std::make_shared<int64_t>(0);
  return Pending::start(
      info.Env(), [store, key, delta, value] { *value = store->store->add(key, delta); },
      [value](Napi::Env env) -> Napi::Value { return Napi::Number::New(env, static_cast<double>(*value)); });
}

// Drops the registry's reference; a group made over the store keeps its own.
Napi::Value distStoreFree(const Napi::CallbackInfo& info) {
  auto store = stores().take(info[0]);
  return Pending::start(info.Env(), [store]() mutable { store.reset(); });
}

// ---- groups ----

// distGroupCreate(store, rank, worldSize, backend, timeoutMs, interfaces, checkCollectives) -> Promise<id>. Returns once every rank
// connected (Gloo's full mesh), or rejects at the timeout. `interfaces` (Gloo only): network interface names to use,
// as GLOO_SOCKET_IFNAME lists them; empty: the interface the host name resolves to.
Napi::Value distGroupCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto store = stores().get(info[0], "store");
  int rank = static_cast<int>(toInt(info[1]));
  int worldSize = static_cast<int>(toInt(info[2]));
  std::string backend = info[3].As<Napi::String>().Utf8Value();
  Milliseconds timeout = toTimeout(info[4]);
  std::vector<std::string> interfaces;
  Napi::Array names = info[5].As<Napi::Array>();
  for (uint32_t i = 0; i < names.Length(); ++i) interfaces.push_back(names.Get(i).As<Napi::String>().Utf8Value());
  bool checkCollectives = toBool(info[6]);
  auto group = std::make_shared<Group>();
  group->store = store->store;
  Pending::Body body;
#ifdef TRT_HAVE_GLOO
  auto makeGloo = [rank, worldSize, timeout, interfaces](c10::intrusive_ptr<c10d::Store> store) {
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    for (const auto& name : interfaces) options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
    if (options->devices.empty()) options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    return c10::make_intrusive<c10d::ProcessGroupGloo>(std::move(store), rank, worldSize, options);
  };
#endif
  // checkCollectives: c10d's ProcessGroupWrapper (PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL) runs, before each
  // collective, a monitored barrier (which names the ranks that did not arrive) and a comparison of every rank's
  // collective, shapes and dtypes over a second, Gloo group: ranks that disagree get an error saying how, instead of
  // Gloo aborting the process on a size mismatch. It costs two small collectives per collective.
  // [=]: makeGloo exists only in a build with Gloo (a CUDA build may have NCCL alone)
  auto wrap = [=](Group& group) {
    if (!checkCollectives) return;
#ifdef TRT_HAVE_GLOO
    auto checks = makeGloo(c10::make_intrusive<c10d::PrefixStore>("trinity-checks", group.store));
    group.backend = c10::make_intrusive<c10d::ProcessGroupWrapper>(group.backend, checks);
#else
    (void)group;
    throw std::runtime_error("checkCollectives needs Gloo, and this addon was built without it");
#endif
  };
  if (backend == "gloo") {
#ifdef TRT_HAVE_GLOO
    body = [group, makeGloo, wrap] {
      group->backend = makeGloo(group->store);
      wrap(*group);
    };
#else
    throw Napi::Error::New(env, "this addon was built without Gloo (gloo's headers were missing at build time): " +
                                    std::string("install them (Debian: apt-get install libgloo-dev) and run node native/build.mjs"));
#endif
  } else if (backend == "nccl") {
#ifdef TRT_HAVE_NCCL
    body = [group, rank, worldSize, timeout, wrap] {
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = timeout;
      group->backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(group->store, rank, worldSize, options);
      wrap(*group);
    };
#else
    throw Napi::Error::New(env, "this addon was built without NCCL (it needs a CUDA libtorch with ProcessGroupNCCL and "
                                "NCCL's headers at build time): use the gloo backend");
#endif
  } else {
    throw Napi::TypeError::New(env, "unknown backend " + info[3].As<Napi::String>().Utf8Value() + ": expected gloo or nccl");
  }
  return Pending::start(env, std::move(body), [group](Napi::Env env) -> Napi::Value {
    return Napi::Number::New(env, static_cast<double>(groups().add(group)));
  });
}

// distGroupDestroy(group) -> Promise: drops the group; the process group is torn down (its threads joined) off the
// JS thread, once no collective in flight holds it.
Napi::Value distGroupDestroy(const Napi::CallbackInfo& info) {
  auto group = groups().take(info[0]);
  return Pending::start(info.Env(), [group]() mutable {
    if (group && group.use_count() == 1 && group->backend) group->backend->shutdown();
    group.reset();
  });
}

// ---- collectives: each issues its work now and resolves when the work completed ----

Napi::Value settle(Napi::Env env, std::shared_ptr<Group> group, std::function<WorkList(c10d::Backend&)> issue,
                   Pending::Result result = nullptr) {
  uint64_t ticket = group->takeTicket();
  return Pending::start(
      env,
      [group = std::move(group), issue = std::move(issue), ticket]() mutable {
        WorkList works = group->issueInTurn(ticket, [&] { return issue(*group->backend); });
        issue = nullptr;
        waitAll(works);
        works.clear();
        group.reset();
      },
      std::move(result));
}

// distAllReduce(group, tensors, op, timeoutMs, coalesced): in place. coalesced: one collective over all the tensors
// (c10d flattens them; they must share dtype and device); else one collective per tensor, all issued before waiting.
Napi::Value distAllReduce(const Napi::CallbackInfo& info) {
  auto group = groups().get(info[0], "process group");
  std::vector<at::Tensor> tensors = tensorList(info[1]);
  c10d::ReduceOp op = toReduceOp(info[2]);
  Milliseconds timeout = toTimeout(info[3]);
  bool coalesced = toBool(info[4]);
  return settle(info.Env(), std::move(group), [tensors, op, timeout, coalesced](c10d::Backend& backend) mutable {
    WorkList works;
    if (coalesced) {
      c10d::AllreduceCoalescedOptions options;
      options.reduceOp = op;
      options.timeout = timeout;
      works.push_back(backend.allreduce_coalesced(tensors, options));
    } else {
      c10d::AllreduceOptions options;
      options.reduceOp = op;
      options.timeout = timeout;
      for (const auto& tensor : tensors) {
        std::vector<at::Tensor> one{tensor};
        works.push_back(backend.allreduce(one, options));
      }
    }
    return works;
  });
}

// distBroadcast(group, tensors, root, timeoutMs): in place, one collective per tensor.
Napi::Value distBroadcast(const Napi::CallbackInfo& info) {
  auto group = groups().get(info[0], "process group");
  std::vector<at::Tensor> tensors = tensorList(info[1]);
  c10d::BroadcastOptions options;
  options.rootRank = toInt(info[2]);
  options.timeout = toTimeout(info[3]);
  return settle(info.Env(), std::move(group), [tensors, options](c10d::Backend& backend) {
    WorkList works;
    for (const auto& tensor : tensors) {
      std::vector<at::Tensor> one{tensor};
      works.push_back(backend.broadcast(one, options));
    }
    return works;
  });
}

// distAllGather(group, tensor, timeoutMs) -> Promise<handles>: world-size new tensors, rank order.
Napi::Value distAllGather(const Napi::CallbackInfo& info) {
  auto group = groups().get(info[0], "process group");
  std::vector<at::Tensor> inputs{unwrap(info[1])};
  c10d::AllgatherOptions options;
  options.timeout = toTimeout(info[2]);
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int i = 0; i < group->backend->getSize(); ++i) outputs[0].push_back(at::empty_like(inputs[0]));
  return settle(
      info.Env(), std::move(group),
      [outputs, inputs, options](c10d::Backend& backend) mutable {
        return WorkList{backend.allgather(outputs, inputs, options)};
      },
      [outputs](Napi::Env env) { return wrapList(env, outputs[0]); });
}

// distReduceScatter(group, input, op, timeoutMs) -> Promise<handle>: input's dim 0 is world size x the shard's; rank r
// gets the reduction of every rank's r-th slice.
Napi::Value distReduceScatter(const Napi::CallbackInfo& info) {
  auto group = groups().get(info[0], "process group");
  at::Tensor input = unwrap(info[1]).contiguous();
  c10d::ReduceScatterOptions options;
  options.reduceOp = toReduceOp(info[2]);
  options.timeout = toTimeout(info[3]);
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] /= group->backend->getSize();
  at::Tensor output = at::empty(shape, input.options());
  return settle(
      info.Env(), std::move(group),
      [output, input, options](c10d::Backend& backend) mutable {
        return WorkList{backend._reduce_scatter_base(output, input, options)};
      },
      [output](Napi::Env env) { return wrap(env, output); });
}

// distBarrier(group, timeoutMs)
Napi::Value distBarrier(const Napi::CallbackInfo& info) {
  auto group = groups().get(info[0], "process group");
  c10d::BarrierOptions options;
  options.timeout = toTimeout(info[1]);
  return settle(info.Env(), std::move(group),
                [options](c10d::Backend& backend) { return WorkList{backend.barrier(options)}; });
}

// ---- gradient buckets fed by autograd hooks: the all-reduce overlaps the backward (PyTorch DDP's Reducer, reduced
// to what the trainer needs) ----
//
// Each parameter gets a post-accumulate-grad hook (the C++ slot PyTorch's register_post_accumulate_grad_hook uses; no
// Python here, so the slot is ours). While the buckets are armed, a hook that fires moves the parameter's gradient
// into its target's (the float32 master weight's, cast; or the parameter itself) and marks it ready; a bucket whose
// parameters are all ready is issued as one coalesced all-reduce, in bucket order (every rank issues the same
// buckets in the same order, as DDP does, whatever order the hooks fire in). Hooks run on the thread that runs the
// backward (the caller's on CPU; autograd's device threads on CUDA), hence the mutex. finish() zero-fills and issues
// the buckets the backward did not complete, then waits for all of them off the JS thread. Parameters marked
// unhooked (reached by several backward calls of one micro-batch: a chunked LM head, tied embeddings) are never
// marked ready by a hook: their buckets go at finish(). A hook that fires for a parameter whose bucket was already
// issued is an error (its gradient would miss the sum).
struct GradBuckets {
  std::shared_ptr<Group> group;
  std::vector<at::Tensor> params;
  std::vector<at::Tensor> targets;
  bool separateTargets = false;
  std::vector<std::vector<size_t>> buckets;
  std::vector<int64_t> bucketOf;  // -1: unhooked
  c10d::ReduceOp op = c10d::ReduceOp::SUM;
  Milliseconds timeout{0};

  std::mutex mutex;
  bool armed = false;
  std::vector<bool> ready;
  std::vector<size_t> waiting;  // per bucket: parameters not ready yet
  size_t nextBucket = 0;        // buckets [0, nextBucket) are issued
  WorkList works;

  // The parameter's gradient into its target's .grad (the target's dtype), under `mutex`.
  void moveGradient(size_t i) {
    if (!separateTargets) return;
    at::Tensor& grad = params[i].mutable_grad();
    if (!grad.defined()) return;
    at::Tensor& into = targets[i].mutable_grad();
    if (into.defined())
      into.add_(grad);
    else
      into = grad.to(targets[i].scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    grad = at::Tensor();
  }

  // The bucket's target gradients (zeros where a target has none), issued as one collective in the group's order.
  void issue(size_t b) {
    std::vector<at::Tensor> grads;
    for (size_t i : buckets[b]) {
      at::Tensor& g = targets[i].mutable_grad();
      if (!g.defined()) g = at::zeros_like(targets[i]);
      grads.push_back(g);
    }
    c10d::AllreduceCoalescedOptions options;
    options.reduceOp = op;
    options.timeout = timeout;
    WorkList issued = group->issueInTurn(group->takeTicket(), [&] {
      return WorkList{group->backend->allreduce_coalesced(grads, options)};
    });
    works.insert(works.end(), issued.begin(), issued.end());
  }

  void markReady(size_t i) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!armed || bucketOf[i] < 0) return;
    auto b = static_cast<size_t>(bucketOf[i]);
    if (b < nextBucket)
      throw std::runtime_error("gradient buckets: parameter " + std::to_string(i) + " received a gradient after its bucket " +
                               std::to_string(b) + " was all-reduced (the backward reaches it more than once: mark it unhooked)");
    moveGradient(i);
    if (ready[i]) return;  // a second accumulation before its bucket went: moved above, still in the sum
    ready[i] = true;
    waiting[b]--;
    while (nextBucket < buckets.size() && waiting[nextBucket] == 0) issue(nextBucket++);
  }
};

struct ReadyHook : torch::autograd::PostAccumulateGradHook {
  std::weak_ptr<GradBuckets> owner;
  size_t index;
  ReadyHook(std::weak_ptr<GradBuckets> owner, size_t index) : owner(std::move(owner)), index(index) {}
  void operator()(const torch::autograd::Variable& /*param*/) override {
    if (auto buckets = owner.lock()) buckets->markReady(index);
  }
};

Registry<GradBuckets>& gradBuckets() {
  static auto* registry = new Registry<GradBuckets>();
  return *registry;
}

// distGradBucketsCreate(group, params, targets | null, buckets, hooked, op, timeoutMs) -> id. buckets: lists of
// parameter indices in issue order (each parameter in exactly one; all of a bucket's targets share dtype and device);
// hooked[i]: whether parameter i's hook marks it ready. Installs the hooks (replacing any this slot held).
Napi::Value distGradBucketsCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto state = std::make_shared<GradBuckets>();
  state->group = groups().get(info[0], "process group");
  state->params = tensorList(info[1]);
  state->separateTargets = !isNullish(info[2]);
  state->targets = state->separateTargets ? tensorList(info[2]) : state->params;
  size_t n = state->params.size();
  if (state->targets.size() != n)
    throw Napi::RangeError::New(env, "gradient buckets: " + std::to_string(n) + " parameters but " +
                                         std::to_string(state->targets.size()) + " targets");
  Napi::Array buckets = info[3].As<Napi::Array>();
  Napi::Array hooked = info[4].As<Napi::Array>();
  state->bucketOf.assign(n, -2);
  std::vector<bool> isHooked(n, false);
  for (uint32_t i = 0; i < hooked.Length() && i < n; ++i) isHooked[i] = toBool(hooked.Get(i));
  for (uint32_t b = 0; b < buckets.Length(); ++b) {
    std::vector<size_t> members;
    for (int64_t i : intList(buckets.Get(b))) {
      if (i < 0 || static_cast<size_t>(i) >= n || state->bucketOf[i] != -2)
        throw Napi::RangeError::New(env, "gradient buckets: index " + std::to_string(i) + " in bucket " + std::to_string(b) +
                                             " is out of range or in two buckets");
      state->bucketOf[i] = isHooked[i] ? static_cast<int64_t>(b) : -1;
      members.push_back(static_cast<size_t>(i));
    }
    state->buckets.push_back(std::move(members));
  }
  for (size_t i = 0; i < n; ++i) {
    if (state->bucketOf[i] == -2)
      throw Napi::RangeError::New(env, "gradient buckets: parameter " + std::to_string(i) + " is in no bucket");
    if (!state->params[i].is_leaf() || !state->params[i].requires_grad())
      throw Napi::TypeError::New(env, "gradient buckets: parameter " + std::to_string(i) + " is not a leaf that requires grad");
  }
  state->op = toReduceOp(info[5]);
  state->timeout = toTimeout(info[6]);
  for (size_t i = 0; i < n; ++i)
    if (state->bucketOf[i] >= 0)
      torch::autograd::impl::set_post_acc_grad_hooks(state->params[i], std::make_unique<ReadyHook>(state, i));
  return Napi::Number::New(env, static_cast<double>(gradBuckets().add(state)));
}

// distGradBucketsArm(id): the next backward's gradients are summed as they arrive (call before the last micro-batch's
// backward of a step). Drops the state of a round that was never finished.
Napi::Value distGradBucketsArm(const Napi::CallbackInfo& info) {
  auto state = gradBuckets().get(info[0], "gradient buckets");
  std::lock_guard<std::mutex> lock(state->mutex);
  state->armed = true;
  state->ready.assign(state->params.size(), false);
  state->waiting.clear();
  for (const auto& bucket : state->buckets) {
    size_t hooked = 0;
    for (size_t i : bucket) hooked += state->bucketOf[i] >= 0 ? 1 : 0;
    // a bucket with unhooked members waits for finish(): one more than its hooked members
    state->waiting.push_back(hooked + (hooked < bucket.size() ? 1 : 0));
  }
  state->nextBucket = 0;
  state->works.clear();
  return info.Env().Undefined();
}

// distGradBucketsFinish(id) -> Promise<number>: the number of buckets the hooks issued during the backward. Disarms; moves the gradients of parameters whose hooks did not run, issues the
// remaining buckets (zeros for targets without a gradient, on this thread, in order), and resolves when every bucket
// of the round completed. Works without arm() too (a rank that ran no backward this step): every bucket goes here.
Napi::Value distGradBucketsFinish(const Napi::CallbackInfo& info) {
  auto state = gradBuckets().get(info[0], "gradient buckets");
  WorkList works;
  size_t early = 0;
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    early = state->armed ? state->nextBucket : 0;
    state->armed = false;
    for (size_t i = 0; i < state->params.size(); ++i)
      if (state->ready.size() != state->params.size() || !state->ready[i]) state->moveGradient(i);
    while (state->nextBucket < state->buckets.size()) state->issue(state->nextBucket++);
    works.swap(state->works);
    state->ready.clear();
    state->nextBucket = 0;  // the next round (armed or not) issues every bucket again
  }
  return Pending::start(
      info.Env(),
      [works]() mutable {
        waitAll(works);
        works.clear();
      },
      [early](Napi::Env env) -> Napi::Value { return Napi::Number::New(env, static_cast<double>(early)); });
}

// distGradBucketsFree(id): removes the hooks; a round in flight still completes.
Napi::Value distGradBucketsFree(const Napi::CallbackInfo& info) {
  auto state = gradBuckets().take(info[0]);
  if (state) {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->armed = false;
    for (size_t i = 0; i < state->params.size(); ++i)
      if (state->bucketOf[i] >= 0) torch::autograd::impl::set_post_acc_grad_hooks(state->params[i], nullptr);
  }
  return info.Env().Undefined();
}

// distBackends() -> { gloo, nccl }: what this build of the addon can create.
Napi::Value distBackends(const Napi::CallbackInfo& info) {
  Napi::Object out = Napi::Object::New(info.Env());
#ifdef TRT_HAVE_GLOO
  out.Set("gloo", true);
#else
  out.Set("gloo", false);
#endif
#ifdef TRT_HAVE_NCCL
  out.Set("nccl", true);
#else
  out.Set("nccl", false);
#endif
  return out;
}

}  // namespace

void registerDistributed(Napi::Object exports) {
  TRT_EXPORT(exports, "distStoreCreate", distStoreCreate);
  TRT_EXPORT(exports, "distStoreSet", distStoreSet);
  TRT_EXPORT(exports, "distStoreGet", distStoreGet);
  TRT_EXPORT(exports, "distStoreAdd", distStoreAdd);
  TRT_EXPORT(exports, "distStoreFree", distStoreFree);
  TRT_EXPORT(exports, "distGroupCreate", distGroupCreate);
  TRT_EXPORT(exports, "distGroupDestroy", distGroupDestroy);
  TRT_EXPORT(exports, "distAllReduce", distAllReduce);
  TRT_EXPORT(exports, "distBroadcast", distBroadcast);
  TRT_EXPORT(exports, "distAllGather", distAllGather);
  TRT_EXPORT(exports, "distReduceScatter", distReduceScatter);
  TRT_EXPORT(exports, "distBarrier", distBarrier);
  TRT_EXPORT(exports, "distBackends", distBackends);
  TRT_EXPORT(exports, "distGradBucketsCreate", distGradBucketsCreate);
  TRT_EXPORT(exports, "distGradBucketsArm", distGradBucketsArm);
  TRT_EXPORT(exports, "distGradBucketsFinish", distGradBucketsFinish);
  TRT_EXPORT(exports, "distGradBucketsFree", distGradBucketsFree);
}

}  // namespace trt
