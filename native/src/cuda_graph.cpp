// CUDA graphs for captured steps (capture.h): a step captured on a CUDA device is recorded once more as a CUDA graph
// (at::cuda::CUDAGraph, as gpt-fast and vLLM run their decode steps), and its replays launch that graph: one launch
// instead of one kernel launch per op.
//
// A graph reads and writes fixed addresses, so it is recorded over static copies of the step's inputs; a replay
// copies the new inputs into them, launches the graph on the current stream and returns copies of the static outputs
// (the next launch overwrites those). Weights and caches are the step's constants: the graph uses them by address,
// so in-place writes to them (KV-cache appends, weight syncs that copy into the parameters) are seen by every launch.
// Recording runs the step once eagerly on a side stream (which also initialises what the ops set up lazily, such as
// cuBLAS's workspace for that stream), then records it there in thread-local capture mode, so other threads' CUDA
// work (a trainer in the same process) is not disturbed; that eager run's outputs are the result of the call that
// recorded the graph, so every call runs the step exactly once. An op that cannot run inside a graph (one that
// synchronises with the host) makes recording fail with its error; the caller then keeps replaying op by op.
//
// Compiled with TRT_CUDA_GRAPHS when the addon is built against a CUDA libtorch and CUDA's runtime headers are
// found (native/build.mjs); otherwise cudaGraphsUnavailable() says why.
#include "capture.h"

#ifdef TRT_CUDA_GRAPHS
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/Event.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace trt {

#ifdef TRT_CUDA_GRAPHS

const char* cudaGraphsUnavailable() { return nullptr; }

namespace {

class CudaStepGraph final : public StepGraph {
 public:
  c10::Device device;
  std::vector<at::Tensor> inputs;   // the static inputs the graph reads
  std::vector<at::Tensor> outputs;  // the static outputs it writes
  std::unique_ptr<at::cuda::CUDAGraph> graph;

  explicit CudaStepGraph(c10::Device d) : device(d) {}

  std::vector<at::Tensor> replay(const std::vector<at::Tensor>& next) override {
    c10::cuda::CUDAGuard guard(device);
    for (size_t i = 0; i < inputs.size(); ++i) inputs[i].copy_(next[i]);
    graph->replay();
    std::vector<at::Tensor> results;
    results.reserve(outputs.size());
    for (const at::Tensor& t : outputs) results.push_back(t.clone());
    return results;
  }

  ~CudaStepGraph() override {
    // a launch may still be running on the GPU: the graph's memory goes back to the allocator only after it ends
    try {
      c10::cuda::CUDAGuard guard(device);
      c10::cuda::getCurrentCUDAStream().synchronize();
    } catch (...) {
    }
  }
};

// The memory pool of the graphs this thread records on `device`. Graphs share one pool, as vLLM's decode graphs do, so
// that they hold about the memory of the largest step rather than of all of them together. That is safe because a
// thread launches its graphs one after another on its current stream, each graph's static outputs stay allocated
// while it lives, and a launch's other memory is dead when it ends (replays return copies).
// The allocators count a pool's users and retire it when the count reaches 0 (its last graph destroyed, e.g. an
// engine closed); a retired pool cannot be shared again (an internal assert, "use_count > 0", at the next capture).
// So the thread holds one count of its own for good: beginAllocateToPool creates the pool with a count of 1,
// endAllocateToPool only stops routing allocations into it. Since torch 2.11 the pinned-host allocator keeps pools
// too (capture_begin routes a capture's pinned allocations into the pool of the same id, counted the same way):
// the thread holds a count there as well, where that allocator has pools.
// (The pool id's type moved between torch versions, from c10::cuda to c10: it is named through graph_pool_handle.)
using PoolId = decltype(at::cuda::graph_pool_handle());

// The pinned-host allocator's pool calls, where this torch has them (a template, so that `requires` can test it).
template <typename HostAllocator>
void holdHostPool(HostAllocator* host, const PoolId& pool) {
  if constexpr (requires { host->begin_allocate_to_pool(pool, [](c10::Stream) { return false; }); }) {
    try {
      host->begin_allocate_to_pool(pool, [](c10::Stream) { return false; });
      host->end_allocate_to_pool(pool);
    } catch (const c10::NotImplementedError&) {
      // an allocator without pools: capture_begin does not route into one either
    }
  }
}
template <typename HostAllocator>
void endHostCapture(HostAllocator* host, const PoolId& pool) {
  if constexpr (requires { host->end_allocate_to_pool(pool); }) {
    try {
      host->end_allocate_to_pool(pool);
    } catch (...) {
      // not recording to it (capture_end got that far, or the allocator has no pools)
    }
  }
}

PoolId sharedPool(const c10::Device& device) {
  thread_local std::unordered_map<c10::DeviceIndex, PoolId> pools;
  auto it = pools.find(device.index());
  if (it != pools.end()) return it->second;
  PoolId pool = at::cuda::graph_pool_handle();
  c10::cuda::CUDACachingAllocator::beginAllocateToPool(device.index(), pool, [](cudaStream_t) { return false; });
  c10::cuda::CUDACachingAllocator::endAllocateToPool(device.index(), pool);
  holdHostPool(at::getHostAllocator(at::kCUDA), pool);
  pools.emplace(device.index(), pool);
  return pool;
}

// Makes `waiter` wait for the work queued so far on `stream`.
void streamWaits(const c10::Stream& waiter, const c10::Stream& stream) {
  c10::Event event(c10::DeviceType::CUDA);
  event.record(stream);
  event.block(waiter);
}

}  // namespace

std::unique_ptr<StepGraph> recordStepGraph(c10::Device device, const std::vector<at::Tensor>& inputs, const StepRunner& run,
                                           std::vector<at::Tensor>& firstOutputs) {
  c10::cuda::CUDAGuard guard(device);
  auto graph = std::make_unique<CudaStepGraph>(device);
  for (const at::Tensor& t : inputs) {
    at::Tensor copy = at::empty_strided(t.sizes(), t.strides(), t.options());
    copy.copy_(t);
    graph->inputs.push_back(std::move(copy));
  }
  c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device.index());
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device.index());
  streamWaits(side, current);
  {
    c10::cuda::CUDAStreamGuard onSide(side);
    firstOutputs = run(graph->inputs);
    // the results are used on the caller's stream from now on: the allocator must not reuse their memory for the
    // side stream before that stream is done with them
    for (const at::Tensor& t : firstOutputs)
      if (t.defined() && t.is_cuda()) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), current);
    graph->graph = std::make_unique<at::cuda::CUDAGraph>();
    PoolId pool{};
    try {
      pool = sharedPool(device);
      graph->graph->capture_begin(pool, cudaStreamCaptureModeThreadLocal);
      graph->outputs = run(graph->inputs);
    } catch (const std::exception& error) {
      // end the (invalidated) capture so the stream and the allocator leave capture mode, then say which op failed
      std::string reason = errorMessage(error);
      try {
        graph->graph->capture_end();
      } catch (...) {
      }
      try {
        c10::cuda::CUDACachingAllocator::endAllocateToPool(device.index(), pool);
      } catch (...) {
      }
      endHostCapture(at::getHostAllocator(at::kCUDA), pool);
      (void)cudaGetLastError();
      streamWaits(current, side);
      throw GraphCaptureFailed(reason);
    }
    try {
      graph->graph->capture_end();
    } catch (const std::exception& error) {
      (void)cudaGetLastError();
      streamWaits(current, side);
      throw GraphCaptureFailed(errorMessage(error));
    }
  }
  streamWaits(current, side);
  return graph;
}

#else

const char* cudaGraphsUnavailable() {
  return "this addon was built without CUDA graphs (its libtorch has no CUDA, or CUDA's runtime headers were not "
         "found when it was built: see native/build.mjs)";
}

std::unique_ptr<StepGraph> recordStepGraph(c10::Device, const std::vector<at::Tensor>&, const StepRunner&,
                                           std::vector<at::Tensor>&) {
  throw std::logic_error(cudaGraphsUnavailable());
}

#endif

}  // namespace trt
