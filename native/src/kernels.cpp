// CPU kernels libtorch lacks: a linear layer for few rows (decoding) with the weight packed in advance, attention
// of one query per row over a cache (decodeAttention, below), an RMSNorm in one pass (decodeRmsNorm), the rotary
// embedding in one pass (decodeRotary) and the KV cache's row writes (writeCacheRows).
//
// packLinear(w[N, K]) -> [ceil(N / 16), K, 16]: 16-column panels, panel p holding W[16p .. 16p + 15, :] transposed
// (zero rows past N). packedLinear(x[..., K], packed, bias[N] | null, N) -> x W^T + bias, [..., N]. float32, or
// bfloat16 (weights widened to float32 in registers, float32 accumulation, the output rounded to bfloat16 once, as a
// bf16 GEMM does): on CPUs without AVX512 libtorch has no fast bf16 product at all (~1 GFLOP/s). Three paths, picked
// by what the CPU has: AVX2 (6-row blocks), AVX-512 (12-row blocks) and, for bf16, AVX512-BF16 dot products (below).
//
// Why: MKL's sgemm multiplies a few rows (1-64) by a weight matrix far below both the memory bandwidth and the FMA
// peak of an AVX2 core: measured here (Zen 3, one thread) at 8 rows ~20 GFLOP/s, i.e. the weights stream at ~5 GB/s
// where a sum reads 16 GB/s. Decoding is exactly that product. This kernel streams each panel once from memory (2 KB
// ahead prefetched) and multiplies it, from L1/L2, with blocks of up to 6 rows held in 12 AVX registers; a single row
// reads 4 panels at once instead. ~40 GFLOP/s at 8 rows and ~60-75 at 32 on one thread, about 2x on two
// (`npm run bench:packed-linear` against libtorch's linear). Each output is one float32 FMA chain over k in order, so
// results differ from MKL's only by float32 rounding and do not depend on the thread count.
// The kernel runs on CPUs with AVX2 and FMA (checked at run time: packedLinearSupported()); elsewhere callers keep
// at::linear. Panels are split across the intra-op threads (at::parallel_for: this file is compiled with -fopenmp,
// see native/build.mjs).
#include "capture.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>
#include <cstring>
#include <type_traits>
#include <utility>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define TRT_PACKED_LINEAR 1
#define TRT_AVX2 __attribute__((target("avx2,fma")))
// without FMA: for loads, stores and conversions (inlined into either), and where products and sums must round
// separately (decodeRotary)
#define TRT_AVX2_NO_FMA __attribute__((target("avx2")))
#else
#define TRT_PACKED_LINEAR 0
#endif

namespace trt {

constexpr int64_t kPanel = 16;      // output columns per panel: two 8-float AVX registers
constexpr int64_t kRowChunk = 64;   // rows multiplied per pass over the panels (their inputs stay in L2)
constexpr int64_t kPrefetchAhead = 32;  // k-steps the first row block prefetches ahead (float32: 2 KB, bf16: 1 KB)

#if TRT_PACKED_LINEAR

// 8 weights as float32: float32 as they are, bfloat16 (its bits) widened by a 16-bit shift (exact)
TRT_AVX2_NO_FMA static inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
TRT_AVX2_NO_FMA static inline __m256 load8(const uint16_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// A bfloat16 value (its bits) as float32, exactly; float32 as it is.
static inline float widen(float v) { return v; }
static inline float widen(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
// float32 -> bfloat16 bits, rounded to nearest even, NaN -> 0x7FC0: c10::BFloat16's rounding (ATen's vectorized
// conversions give the same bits for every number; a NaN of theirs may carry other payload bits)
static inline uint16_t narrowBf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}
// 8 floats rounded as narrowBf16, in the low 16 bits of each 32-bit lane
TRT_AVX2_NO_FMA static inline __m256i bf16Lanes(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC0), nan);
}
// 8 floats rounded to bfloat16 and widened back (what a bf16 tensor op's result reads as)
TRT_AVX2_NO_FMA static inline __m256 roundedToBf16(__m256 v) { return _mm256_castsi256_ps(_mm256_slli_epi32(bf16Lanes(v), 16)); }
// stores 8 floats as the element type: float32 as they are, bfloat16 rounded (narrowBf16)
TRT_AVX2_NO_FMA static inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
TRT_AVX2_NO_FMA static inline void store8(uint16_t* p, __m256 v) {
  const __m256i lanes = bf16Lanes(v);  // 0..0xFFFF each: packus (signed 32 -> unsigned 16) keeps them
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm_packus_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1)));
}
static inline void store1(float* p, float v) { *p = v; }
static inline void store1(uint16_t* p, float v) { *p = narrowBf16(v); }
// Calls run(pointers...) with the data of `tensors` (all float32 or all bfloat16, as `dtype`) as float* or, for bf16,
// uint16_t* (its bits): one body for both element types.
template <typename Run, typename... Tensors>
static void withElements(at::ScalarType dtype, const Run& run, const Tensors&... tensors) {
  if (dtype == at::kFloat) run(static_cast<float*>(tensors.data_ptr())...);
  else run(static_cast<uint16_t*>(tensors.data_ptr())...);
}

// Y[0..R) x [0..cols) = X rows (stride ldx) times one panel (K x 16), plus bias; R rows, 1 <= R <= 6. The rows are
// spelled out one by one: with an array of accumulators GCC spills them to the stack every k (measured ~2x slower).
template <int R, typename W>
TRT_AVX2 static inline void panelRows(const float* x, int64_t ldx, const W* panel, int64_t K, const float* bias,
                                      float* y, int64_t ldy, int64_t cols, uintptr_t prefetch) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  // row pointers only for rows that exist: x + r * ldx past the last row would point outside the input (undefined
  // behaviour even unread); the rows R..5 alias row 0 and are never read (their uses are compiled out)
  const float* x0 = x;
  const float* x1 = R > 1 ? x + ldx : x;
  const float* x2 = R > 2 ? x + 2 * ldx : x;
  const float* x3 = R > 3 ? x + 3 * ldx : x;
  const float* x4 = R > 4 ? x + 4 * ldx : x;
  const float* x5 = R > 5 ? x + 5 * ldx : x;
  for (int64_t k = 0; k < K; ++k) {
    if (prefetch != 0) _mm_prefetch(reinterpret_cast<const char*>(prefetch + k * kPanel * sizeof(W)), _MM_HINT_T0);
    const __m256 b0 = load8(panel + k * kPanel);
    const __m256 b1 = load8(panel + k * kPanel + 8);
    __m256 a = _mm256_broadcast_ss(x0 + k);
    c00 = _mm256_fmadd_ps(a, b0, c00);
    c01 = _mm256_fmadd_ps(a, b1, c01);
    if constexpr (R > 1) {
      a = _mm256_broadcast_ss(x1 + k);
      c10 = _mm256_fmadd_ps(a, b0, c10);
      c11 = _mm256_fmadd_ps(a, b1, c11);
    }
    if constexpr (R > 2) {
      a = _mm256_broadcast_ss(x2 + k);
      c20 = _mm256_fmadd_ps(a, b0, c20);
      c21 = _mm256_fmadd_ps(a, b1, c21);
    }
    if constexpr (R > 3) {
      a = _mm256_broadcast_ss(x3 + k);
      c30 = _mm256_fmadd_ps(a, b0, c30);
      c31 = _mm256_fmadd_ps(a, b1, c31);
    }
    if constexpr (R > 4) {
      a = _mm256_broadcast_ss(x4 + k);
      c40 = _mm256_fmadd_ps(a, b0, c40);
      c41 = _mm256_fmadd_ps(a, b1, c41);
    }
    if constexpr (R > 5) {
      a = _mm256_broadcast_ss(x5 + k);
      c50 = _mm256_fmadd_ps(a, b0, c50);
      c51 = _mm256_fmadd_ps(a, b1, c51);
    }
  }
  __m256 bias0 = _mm256_setzero_ps(), bias1 = bias0;
  alignas(32) float tail[kPanel];
  if (bias != nullptr) {
    if (cols == kPanel) {
      bias0 = _mm256_loadu_ps(bias);
      bias1 = _mm256_loadu_ps(bias + 8);
    } else {
      for (int64_t j = 0; j < kPanel; ++j) tail[j] = j < cols ? bias[j] : 0.0f;
      bias0 = _mm256_load_ps(tail);
      bias1 = _mm256_load_ps(tail + 8);
    }
  }
  auto store = [&](int64_t r, __m256 lo, __m256 hi) TRT_AVX2 {
    float* row = y + r * ldy;
    lo = _mm256_add_ps(lo, bias0);
    hi = _mm256_add_ps(hi, bias1);
    if (cols == kPanel) {
      _mm256_storeu_ps(row, lo);
      _mm256_storeu_ps(row + 8, hi);
    } else {
      _mm256_store_ps(tail, lo);
      _mm256_store_ps(tail + 8, hi);
      for (int64_t j = 0; j < cols; ++j) row[j] = tail[j];
    }
  };
  store(0, c00, c01);
  if constexpr (R > 1) store(1, c10, c11);
  if constexpr (R > 2) store(2, c20, c21);
  if constexpr (R > 3) store(3, c30, c31);
  if constexpr (R > 4) store(4, c40, c41);
  if constexpr (R > 5) store(5, c50, c51);
}

// One row times 4 consecutive full panels: 4 memory streams at once (one stream reaches ~15 GB/s, four ~24 here).
template <typename W>
TRT_AVX2 static inline void oneRowFourPanels(const float* x, const W* panel, int64_t K, const float* bias, float* y) {
  const W* w0 = panel;
  const W* w1 = w0 + K * kPanel;
  const W* w2 = w1 + K * kPanel;
  const W* w3 = w2 + K * kPanel;
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0, c7 = c0;
  for (int64_t k = 0; k < K; ++k) {
    const __m256 a = _mm256_broadcast_ss(x + k);
    const int64_t o = k * kPanel;
    c0 = _mm256_fmadd_ps(a, load8(w0 + o), c0);
    c1 = _mm256_fmadd_ps(a, load8(w0 + o + 8), c1);
    c2 = _mm256_fmadd_ps(a, load8(w1 + o), c2);
    c3 = _mm256_fmadd_ps(a, load8(w1 + o + 8), c3);
    c4 = _mm256_fmadd_ps(a, load8(w2 + o), c4);
    c5 = _mm256_fmadd_ps(a, load8(w2 + o + 8), c5);
    c6 = _mm256_fmadd_ps(a, load8(w3 + o), c6);
    c7 = _mm256_fmadd_ps(a, load8(w3 + o + 8), c7);
  }
  const __m256 acc[8] = {c0, c1, c2, c3, c4, c5, c6, c7};
  for (int i = 0; i < 8; ++i)
    _mm256_storeu_ps(y + 8 * i, bias != nullptr ? _mm256_add_ps(acc[i], _mm256_loadu_ps(bias + 8 * i)) : acc[i]);
}

// One ISA's kernels for one block of rows of one panel (rows 1..MaxRows, by index R - 1), and for one row times 4
// panels. Called through pointers (a call per panel and block: ~K x R FMAs each), so that one loop serves every ISA.
template <typename X, typename W>
using BlockKernel = void (*)(const X* x, int64_t ldx, const W* panel, int64_t K, const float* bias, float* y,
                             int64_t ldy, int64_t cols, uintptr_t prefetch);
template <typename X, typename W>
using FourPanelKernel = void (*)(const X* x, const W* panel, int64_t K, const float* bias, float* y);

// Panels [first, last) for rows [0, M) (M <= kRowChunk): each panel once, its rows in balanced blocks of at most
// MaxRows; a single row reads 4 panels at once while they are full.
template <typename X, typename W, size_t MaxRows>
static void panelLoop(const X* x, int64_t M, int64_t K, const W* packed, const float* bias, float* y, int64_t N,
                      int64_t first, int64_t last, const std::array<BlockKernel<X, W>, MaxRows>& block,
                      FourPanelKernel<X, W> fourPanels) {
  const int64_t maxRows = static_cast<int64_t>(MaxRows);
  const int64_t blocks = (M + maxRows - 1) / maxRows;
  if (M == 1) {
    for (; first + 4 <= last && (first + 4) * kPanel <= N; first += 4)
      fourPanels(x, packed + first * K * kPanel, K, bias != nullptr ? bias + first * kPanel : nullptr,
                 y + first * kPanel);
  }
  for (int64_t p = first; p < last; ++p) {
    const W* panel = packed + p * K * kPanel;
    // during the first block, the line kPrefetchAhead k-steps ahead (past the panel's end: the next panel's start;
    // prefetching never faults, so the range's end needs no test; an integer address, never an out-of-range pointer)
    uintptr_t prefetch = reinterpret_cast<uintptr_t>(panel) + kPrefetchAhead * kPanel * sizeof(W);
    const int64_t cols = std::min(kPanel, N - p * kPanel);
    const float* b = bias != nullptr ? bias + p * kPanel : nullptr;
    int64_t m = 0;
    for (int64_t i = 0; i < blocks; ++i) {
      const int64_t rows = (M - m) / (blocks - i);  // balanced: 13 rows of 6-row blocks are 4 + 4 + 5
      block[rows - 1](x + m * K, K, panel, K, b, y + m * N + p * kPanel, N, cols, prefetch);
      m += rows;
      prefetch = 0;
    }
  }
}

template <typename W>
static void panels(const float* x, int64_t M, int64_t K, const W* packed, const float* bias, float* y, int64_t N,
                   int64_t first, int64_t last) {
  // {&panelRows<1, W>, ..., &panelRows<6, W>}
  static constexpr auto table = []<int... R>(std::integer_sequence<int, R...>) {
    return std::array<BlockKernel<float, W>, sizeof...(R)>{&panelRows<R + 1, W>...};
  }(std::make_integer_sequence<int, 6>{});
  panelLoop(x, M, K, packed, bias, y, N, first, last, table, &oneRowFourPanels<W>);
}

// ---- the same products with AVX-512 registers (one 16-float register per panel row) ----
// Where AVX-512F is present: a panel's 16 columns are one register, so a block holds up to 12 rows (12 accumulators,
// the x values broadcast straight from memory into the FMA) and each weight load feeds twice as many FMAs as the
// AVX2 blocks' 6 rows. Each output is still one float32 FMA chain over k in order, with the bias added once at the
// end, so both paths give the same bits (test/torch/packed-linear.test.ts checks it). On CPUs that split 512-bit
// operations in two (AMD Zen 4) the gain is in instructions, not FLOPs; on those with two 512-bit FMA units (Intel
// Xeon) it doubles the peak.
#define TRT_AVX512 __attribute__((target("avx512f,avx2,fma")))

TRT_AVX512 static inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
TRT_AVX512 static inline __m512 load16(const uint16_t* p) {
  // the maskz forms (all lanes): the plain ones start from GCC 12's "undefined" register, which -Wall flags
  const __m512i wide = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, wide, 16));
}

// Y[0..R) x [0..cols) = R rows of X times one panel (K x 16), plus bias; 1 <= R <= 12.
template <int R, typename W>
TRT_AVX512 static inline void panelRows512(const float* x, int64_t ldx, const W* panel, int64_t K, const float* bias,
                                           float* y, int64_t ldy, int64_t cols, uintptr_t prefetch) {
  __m512 c[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) c[r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    if (prefetch != 0) _mm_prefetch(reinterpret_cast<const char*>(prefetch + k * kPanel * sizeof(W)), _MM_HINT_T0);
    const __m512 b = load16(panel + k * kPanel);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) c[r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r * ldx + k]), b, c[r]);
  }
  const __mmask16 lanes = cols == kPanel ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << cols) - 1);
  const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(lanes, bias) : _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(y + r * ldy, lanes, bias != nullptr ? _mm512_add_ps(c[r], b) : c[r]);
}

// One row times 4 consecutive full panels (4 memory streams, as oneRowFourPanels).
template <typename W>
TRT_AVX512 static inline void oneRowFourPanels512(const float* x, const W* panel, int64_t K, const float* bias, float* y) {
  const W* w0 = panel;
  const W* w1 = w0 + K * kPanel;
  const W* w2 = w1 + K * kPanel;
  const W* w3 = w2 + K * kPanel;
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  for (int64_t k = 0; k < K; ++k) {
    const __m512 a = _mm512_set1_ps(x[k]);
    const int64_t o = k * kPanel;
    c0 = _mm512_fmadd_ps(a, load16(w0 + o), c0);
    c1 = _mm512_fmadd_ps(a, load16(w1 + o), c1);
    c2 = _mm512_fmadd_ps(a, load16(w2 + o), c2);
    c3 = _mm512_fmadd_ps(a, load16(w3 + o), c3);
  }
  const __m512 acc[4] = {c0, c1, c2, c3};
  for (int i = 0; i < 4; ++i)
    _mm512_storeu_ps(y + 16 * i, bias != nullptr ? _mm512_add_ps(acc[i], _mm512_loadu_ps(bias + 16 * i)) : acc[i]);
}

// as panels(), in blocks of up to 12 rows
template <typename W>
static void panels512(const float* x, int64_t M, int64_t K, const W* packed, const float* bias, float* y, int64_t N,
                      int64_t first, int64_t last) {
  static constexpr auto table = []<int... R>(std::integer_sequence<int, R...>) {
    return std::array<BlockKernel<float, W>, sizeof...(R)>{&panelRows512<R + 1, W>...};
  }(std::make_integer_sequence<int, 12>{});
  panelLoop(x, M, K, packed, bias, y, N, first, last, table, &oneRowFourPanels512<W>);
}

// ---- bfloat16 products with AVX512-BF16 dot products (VDPBF16PS) ----
// Where the CPU has AVX512-BF16 (Intel Cooper Lake, Sapphire Rapids and later; AMD Zen 4 and later), one instruction
// multiplies 16 pairs of bf16 values and adds both products to 16 float32 accumulators: twice the multiply-adds of
// float32 FMAs on widened weights, and no widening. The input rows stay bf16 (no float32 copy); a panel's k-steps k
// and k + 1 (32 adjacent bf16 values) are interleaved into (w[k][j], w[k+1][j]) pairs by one permute, shared by the
// block's rows, so the packed layout is the same as for the other paths. Each output is still one float32 chain over
// k in order, two k-steps per instruction, rounded as the CPU's VDPBF16PS rounds (it treats bf16 denormals, below
// 1.2e-38, as zero): the bits can differ from the FMA paths', by float32 rounding, and do not depend on the row or
// thread count. An odd K ends with one k-step paired with zero.
#define TRT_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,avx2,fma")))

// lane j <- (row k's column j, row k + 1's column j): the permute that turns two panel rows into 16 pairs
alignas(64) static constexpr std::array<int16_t, 32> kPairOrder = [] {
  std::array<int16_t, 32> order{};
  for (int j = 0; j < 16; ++j) {
    order[2 * j] = static_cast<int16_t>(j);
    order[2 * j + 1] = static_cast<int16_t>(16 + j);
  }
  return order;
}();
TRT_AVX512BF16 static inline __m512i pairOrder() { return _mm512_load_si512(kPairOrder.data()); }
TRT_AVX512BF16 static inline __m512bh weightPairs(const uint16_t* twoRows, __m512i order) {
  return reinterpret_cast<__m512bh>(_mm512_permutexvar_epi16(order, _mm512_loadu_si512(twoRows)));
}
// an odd K's last panel row: (w[k][j], 0)
TRT_AVX512BF16 static inline __m512bh lastWeights(const uint16_t* row) {
  return reinterpret_cast<__m512bh>(
      _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row))));
}
// (x[k], x[k + 1]) in every lane; (x[k], 0) when k is the last
TRT_AVX512BF16 static inline __m512bh inputPair(const uint16_t* x, bool last) {
  uint32_t pair = x[0];
  if (!last) std::memcpy(&pair, x, sizeof pair);
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
}

// Y[0..R) x [0..cols) = R bf16 rows of X times one bf16 panel (K x 16), plus bias; 1 <= R <= 12.
template <int R>
TRT_AVX512BF16 static inline void panelRowsDot(const uint16_t* x, int64_t ldx, const uint16_t* panel, int64_t K,
                                               const float* bias, float* y, int64_t ldy, int64_t cols,
                                               uintptr_t prefetch) {
  const __m512i order = pairOrder();
  __m512 c[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) c[r] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 2 <= K; k += 2) {
    // two k-steps of a bf16 panel are one 64-byte line
    if (prefetch != 0) _mm_prefetch(reinterpret_cast<const char*>(prefetch + k * kPanel * 2), _MM_HINT_T0);
    const __m512bh b = weightPairs(panel + k * kPanel, order);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) c[r] = _mm512_dpbf16_ps(c[r], inputPair(x + r * ldx + k, false), b);
  }
  if (k < K) {
    const __m512bh b = lastWeights(panel + k * kPanel);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) c[r] = _mm512_dpbf16_ps(c[r], inputPair(x + r * ldx + k, true), b);
  }
  const __mmask16 lanes = cols == kPanel ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << cols) - 1);
  const __m512 bv = bias != nullptr ? _mm512_maskz_loadu_ps(lanes, bias) : _mm512_setzero_ps();
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
    _mm512_mask_storeu_ps(y + r * ldy, lanes, bias != nullptr ? _mm512_add_ps(c[r], bv) : c[r]);
}

// One bf16 row times 4 consecutive full panels (4 memory streams, as oneRowFourPanels).
TRT_AVX512BF16 static void oneRowFourPanelsDot(const uint16_t* x, const uint16_t* panel, int64_t K, const float* bias,
                                               float* y) {
  const __m512i order = pairOrder();
  const uint16_t* w[4] = {panel, panel + K * kPanel, panel + 2 * K * kPanel, panel + 3 * K * kPanel};
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  int64_t k = 0;
  for (; k + 2 <= K; k += 2) {
    const __m512bh a = inputPair(x + k, false);
    const int64_t o = k * kPanel;
    c0 = _mm512_dpbf16_ps(c0, a, weightPairs(w[0] + o, order));
    c1 = _mm512_dpbf16_ps(c1, a, weightPairs(w[1] + o, order));
    c2 = _mm512_dpbf16_ps(c2, a, weightPairs(w[2] + o, order));
    c3 = _mm512_dpbf16_ps(c3, a, weightPairs(w[3] + o, order));
  }
  if (k < K) {
    const __m512bh a = inputPair(x + k, true);
    const int64_t o = k * kPanel;
    c0 = _mm512_dpbf16_ps(c0, a, lastWeights(w[0] + o));
    c1 = _mm512_dpbf16_ps(c1, a, lastWeights(w[1] + o));
    c2 = _mm512_dpbf16_ps(c2, a, lastWeights(w[2] + o));
    c3 = _mm512_dpbf16_ps(c3, a, lastWeights(w[3] + o));
  }
  const __m512 acc[4] = {c0, c1, c2, c3};
  for (int i = 0; i < 4; ++i)
    _mm512_storeu_ps(y + 16 * i, bias != nullptr ? _mm512_add_ps(acc[i], _mm512_loadu_ps(bias + 16 * i)) : acc[i]);
}

// as panels(), bf16 rows and panels, in blocks of up to 12 rows
static void panelsDot(const uint16_t* x, int64_t M, int64_t K, const uint16_t* packed, const float* bias, float* y,
                      int64_t N, int64_t first, int64_t last) {
  static constexpr auto table = []<int... R>(std::integer_sequence<int, R...>) {
    return std::array<BlockKernel<uint16_t, uint16_t>, sizeof...(R)>{&panelRowsDot<R + 1>...};
  }(std::make_integer_sequence<int, 12>{});
  panelLoop(x, M, K, packed, bias, y, N, first, last, table, &oneRowFourPanelsDot);
}

// AVX-512F present, and libtorch's own kernels allowed to use it: ATEN_CPU_CAPABILITY=avx2 (libtorch's setting)
// narrows ours too, so one variable (with MKL_ENABLE_INSTRUCTIONS=AVX2 for BLAS) runs this CPU as an AVX2-only one.
static bool cpuHasAvx512() {
  static const bool present = __builtin_cpu_supports("avx512f") && at::get_cpu_capability() == "AVX512";
  return present;
}

// AVX512-BF16 dot products, where AVX-512 is in use (above) and the CPU has them (with AVX512BW, for the permute)
static bool cpuHasAvx512Bf16() {
  static const bool present =
      cpuHasAvx512() && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw");
  return present;
}

static bool cpuSupported() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return supported;
}
// Whether libtorch's float32 products stop at AVX2 on this CPU although it has AVX-512 (and libtorch's kernels may use
// it, cpuHasAvx512): its x86 builds multiply through MKL, which takes its AVX-512 code on Intel CPUs only unless its
// vendor check is answered otherwise (blas.cpp, the default), so on AMD's (Zen 4, Zen 5) with TRINITY_MKL_AVX512=off
// its sgemm runs AVX2 code, about half of what the CPU can do (bench/README.md, bench:packed-linear).
static bool cpuBlasHoldsToAvx2() {
  static const bool held = cpuHasAvx512() && at::globalContext().hasMKL() && !mklRunsAvx512();
  return held;
}

// Whether libtorch sends bfloat16 matmuls to oneDNN here: its test (mkldnn_bf16_device_check) on x86 is AVX512 BW, VL
// and DQ (AVX512-BF16 and AMX CPUs all have them), and oneDNN must be enabled (torch.backends.mkldnn.enabled, here
// setMkldnnEnabled). Without, its bf16 products are reference loops: ~1-2 GFLOP/s for the ones without a transposed
// operand, e.g. a linear's input gradient (bench/README.md).
static bool cpuBf16Matmul() {
  static const bool fast = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                           __builtin_cpu_supports("avx512dq");
  return fast && at::globalContext().userEnabledMkldnn();
}


// ---------------------------------------------------------------------------------------------------------------
// decodeAttention(q [B, H, 1, d], k [B, KV, L, d], v [B, KV, L, d], mask bool [B | 1, 1, 1, L] | null, scale)
//   -> softmax(scale q k^T, masked) v  [B, H, 1, d], float32 or bfloat16 (all four alike), no autograd
// One query per row (a decode step) over a cache, grouped heads (query head h reads kv head h / (H / KV)). libtorch's
// fused CPU kernel spends ~80-100 us a call on such shapes whatever their size (32 rows x 4 heads over 64 keys: 0.13 M
// multiply-adds); here each (row, kv head) is one task that reads its keys and values once for its query heads.
// Every output is computed by one thread in a fixed order, so results do not depend on the thread count; they differ
// from libtorch's kernel by float32 rounding. bfloat16 runs the same float32 arithmetic on the values widened as they
// are read (exact) and rounds the output once: the bits of the float32 kernel on widened copies, rounded, without
// widening the cache each step (the model's bf16 attention widens q, k and v to float32, src/model/attention.ts).
template <typename T>
TRT_AVX2 static float dot8(const float* a, const T* b, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load8(b + i), acc);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  float sum = _mm_cvtss_f32(s);
  for (; i < n; ++i) sum += a[i] * widen(b[i]);
  return sum;
}
// scores[l] = q . keys[l] for 8 keys at once (rows `stride` apart), n a multiple of 8: eight accumulators reduced
// together (one hadd tree instead of eight horizontal sums)
template <typename T>
TRT_AVX2 static void dot8x8(const float* q, const T* keys, int64_t stride, int64_t n, float* scores) {
  __m256 a[8];
  for (int r = 0; r < 8; ++r) a[r] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256 x = _mm256_loadu_ps(q + i);
    for (int r = 0; r < 8; ++r) a[r] = _mm256_fmadd_ps(x, load8(keys + r * stride + i), a[r]);
  }
  const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  const __m256 sums = _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
  _mm256_storeu_ps(scores, sums);
}
// exp of 8 floats (Cephes' expf: a degree-5 polynomial on x - n ln 2, scaled by 2^n; relative error ~1e-7, as
// float32 rounding), for x in [-88.37, 88.37] (clamped there; callers pass x <= 0); NaN stays NaN (min/max return
// their second operand when one is NaN)
TRT_AVX2 static __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-88.3762626647949f), _mm256_min_ps(_mm256_set1_ps(88.3762626647949f), x));
  const __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_add_ps(_mm256_fmadd_ps(y, _mm256_mul_ps(x, x), x), _mm256_set1_ps(1.0f));
  const __m256i pow2n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(pow2n));
}
// p[l] = exp(scores[l] - max) (0 where the score is -inf: a masked key), returns their sum
TRT_AVX2 static float softmaxWeights(float* scores, int64_t n, float max) {
  const __m256 vmax = _mm256_set1_ps(max);
  const __m256 masked = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 acc = _mm256_setzero_ps();
  int64_t l = 0;
  for (; l + 8 <= n; l += 8) {
    const __m256 x = _mm256_loadu_ps(scores + l);
    const __m256 p = _mm256_andnot_ps(_mm256_cmp_ps(x, masked, _CMP_EQ_OQ), exp8(_mm256_sub_ps(x, vmax)));
    _mm256_storeu_ps(scores + l, p);
    acc = _mm256_add_ps(acc, p);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  for (; l < n; ++l) {
    const float p = scores[l] == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(scores[l] - max);
    scores[l] = p;
    sum += p;
  }
  return sum;
}
template <typename T>
TRT_AVX2 static void axpy8(float* y, float a, const T* x, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load8(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * widen(x[i]);
}

// One (row, kv head) task's query heads: q, k, v and out pointers at that row and head (element type T), scores and
// (for bf16) two rows of d floats as scratch.
struct AttentionTask {
  int64_t group, d, L, qsh, ksl, vsl, msl;
  float scale;
};
template <typename T>
static void attendGroup(const AttentionTask& t, const T* query0, const T* keys, const T* values, const bool* rowMask,
                        T* out0, float* scores, float* wideQuery, float* wideOut) {
  const int64_t d = t.d, L = t.L;
  for (int64_t g = 0; g < t.group; ++g) {
    const T* q = query0 + g * t.qsh;
    const float* query = nullptr;
    float* o = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      query = q;
      o = out0 + g * d;
    } else {
      for (int64_t i = 0; i < d; ++i) wideQuery[i] = widen(q[i]);
      query = wideQuery;
      o = wideOut;
    }
    int64_t l = 0;
    if (d % 8 == 0)
      for (; l + 8 <= L; l += 8) dot8x8(query, keys + l * t.ksl, t.ksl, d, scores + l);
    for (; l < L; ++l) scores[l] = dot8(query, keys + l * t.ksl, d);
    float max = -std::numeric_limits<float>::infinity();
    for (l = 0; l < L; ++l) {
      if (rowMask && !rowMask[l * t.msl]) {
        scores[l] = -std::numeric_limits<float>::infinity();
        continue;
      }
      scores[l] *= t.scale;
      max = std::max(max, scores[l]);
    }
    if (max == -std::numeric_limits<float>::infinity()) {  // every key masked: NaN, as softmax over none gives
      std::fill(o, o + d, std::numeric_limits<float>::quiet_NaN());
    } else {
      std::fill(o, o + d, 0.0f);
      const float sum = softmaxWeights(scores, L, max);
      for (l = 0; l < L; ++l)
        if (scores[l] != 0.0f) axpy8(o, scores[l], values + l * t.vsl, d);
      const float inv = 1.0f / sum;
      for (int64_t i = 0; i < d; ++i) o[i] *= inv;
    }
    if constexpr (!std::is_same_v<T, float>)
      for (int64_t i = 0; i < d; ++i) store1(out0 + g * d + i, o[i]);
  }
}

static at::Tensor decodeAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const std::optional<at::Tensor>& mask, double scale) {
  RECORD_FUNCTION("trinity::decode_attention", std::vector<c10::IValue>());
  TORCH_CHECK(cpuSupported(), "decodeAttention: this CPU lacks AVX2/FMA (check packedLinearSupported() first)");
  const at::ScalarType dtype = q.scalar_type();
  for (const at::Tensor* t : {&q, &k, &v}) {
    TORCH_CHECK(t->device().is_cpu() && (dtype == at::kFloat || dtype == at::kBFloat16) &&
                    t->scalar_type() == dtype && t->dim() == 4,
                "decodeAttention: q, k and v must be 4-d CPU tensors, all float32 or all bfloat16, got ", t->sizes(),
                " ", t->scalar_type(), " on ", t->device(), " (q: ", q.scalar_type(), ")");
    TORCH_CHECK(t->stride(3) == 1, "decodeAttention: the last dimension of q, k and v must be contiguous");
  }
  const int64_t B = q.size(0), H = q.size(1), d = q.size(3), KV = k.size(1), L = k.size(2);
  TORCH_CHECK(q.size(2) == 1, "decodeAttention: one query per row, got ", q.size(2));
  TORCH_CHECK(k.size(0) == B && v.size(0) == B && v.size(1) == KV && v.size(2) == L && k.size(3) == d && v.size(3) == d,
              "decodeAttention: k and v must be [", B, ", KV, L, ", d, "] alike, got ", k.sizes(), " and ", v.sizes());
  TORCH_CHECK(KV > 0 && H % KV == 0, "decodeAttention: ", H, " query heads are not a multiple of ", KV, " kv heads");
  TORCH_CHECK(L > 0, "decodeAttention: no keys");
  TORCH_CHECK(!at::GradMode::is_enabled() || !(q.requires_grad() || k.requires_grad() || v.requires_grad()),
              "decodeAttention: inference only (no autograd)");
  at::Tensor allowed;
  if (mask) {
    TORCH_CHECK(mask->scalar_type() == at::kBool && mask->dim() == 4 && mask->size(1) == 1 && mask->size(2) == 1 &&
                    mask->size(3) == L && (mask->size(0) == B || mask->size(0) == 1),
                "decodeAttention: the mask must be bool [", B, " or 1, 1, 1, ", L, "], got ", mask->sizes(), " ",
                mask->scalar_type());
    allowed = mask->expand({B, 1, 1, L});
  }
  at::Tensor out = at::empty({B, H, 1, d}, q.options());
  const int64_t group = H / KV;
  const AttentionTask task{group, d, L, q.stride(1), k.stride(2), v.stride(2), mask ? allowed.stride(3) : 0,
                           static_cast<float>(scale)};
  const bool* mp = mask ? allowed.data_ptr<bool>() : nullptr;
  const int64_t qsb = q.stride(0), qsh = q.stride(1), ksb = k.stride(0), ksh = k.stride(1);
  const int64_t vsb = v.stride(0), vsh = v.stride(1);
  const int64_t msb = mask ? allowed.stride(0) : 0;
  // tasks of ~16 K multiply-adds or more per chunk
  const int64_t work = std::max<int64_t>(1, group * L * d * 2);
  const int64_t grain = std::max<int64_t>(1, 16384 / work);
  auto run = [&](auto* qp, auto* kp, auto* vp, auto* op) {
    at::parallel_for(0, B * KV, grain, [&](int64_t first, int64_t last) {
      std::vector<float> scratch(L + 2 * d);
      for (int64_t i = first; i < last; ++i) {
        const int64_t b = i / KV, j = i % KV;
        attendGroup(task, qp + b * qsb + j * group * qsh, kp + b * ksb + j * ksh, vp + b * vsb + j * vsh,
                    mp ? mp + b * msb : nullptr, op + (b * H + j * group) * d, scratch.data(), scratch.data() + L,
                    scratch.data() + L + d);
      }
    });
  };
  withElements(dtype, run, q, k, v, out);
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// decodeRmsNorm(x [..., n], weight [n], eps) -> x * rsqrt(mean(x^2) + eps) * weight, float32 or bfloat16, no autograd
// libtorch's CPU rms_norm runs as ~10 ATen ops (to, pow, mean = sum + div, add, rsqrt, mul, type_as, mul by the
// weight), ~9 us a call even for one row of 512; a decode step of a small model calls it 2 x layers + 1 times (the
// quickstart model's step at batch 8: 9 calls of 0.82 ms). One pass per row here: the sum of squares in 8 float32
// lanes (then added in a fixed order), then the scaled product. Each row is one thread's, in a fixed order, so the
// bits do not depend on the thread count or on the other rows; they differ from libtorch's by float32 rounding.
// bfloat16 (input and weight) rounds as transformers' RMSNorm and the model's bf16 rmsNorm do: the normalized row in
// float32, rounded to bf16, times the weight, rounded again (a product of two bf16 values is exact in float32).
template <typename T>
TRT_AVX2 static void rmsNormRow(const T* x, const T* w, T* y, int64_t n, float eps) {
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = load8(x + i);
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  for (; i < n; ++i) sum += widen(x[i]) * widen(x[i]);
  const float scale = 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
  const __m256 s = _mm256_set1_ps(scale);
  if constexpr (std::is_same_v<T, float>) {
    for (i = 0; i + 8 <= n; i += 8)
      _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), s), _mm256_loadu_ps(w + i)));
    for (; i < n; ++i) y[i] = (x[i] * scale) * w[i];
  } else {
    for (i = 0; i + 8 <= n; i += 8)
      store8(y + i, _mm256_mul_ps(roundedToBf16(_mm256_mul_ps(load8(x + i), s)), load8(w + i)));
    for (; i < n; ++i) store1(y + i, widen(narrowBf16(widen(x[i]) * scale)) * widen(w[i]));
  }
}

static at::Tensor decodeRmsNorm(const at::Tensor& input, const at::Tensor& weight, double eps) {
  RECORD_FUNCTION("trinity::decode_rms_norm", std::vector<c10::IValue>());
  TORCH_CHECK(cpuSupported(), "decodeRmsNorm: this CPU lacks AVX2/FMA (check packedLinearSupported() first)");
  const at::ScalarType dtype = input.scalar_type();
  for (const at::Tensor* t : {&input, &weight})
    TORCH_CHECK(t->device().is_cpu() && (dtype == at::kFloat || dtype == at::kBFloat16) && t->scalar_type() == dtype,
                "decodeRmsNorm: the input and the weight must be CPU tensors, both float32 or both bfloat16, got ",
                input.scalar_type(), " and ", weight.scalar_type(), " on ", t->device());
  TORCH_CHECK(input.dim() >= 1 && weight.dim() == 1 && weight.size(0) == input.size(-1), "decodeRmsNorm: the weight must",
              " be [", input.dim() >= 1 ? input.size(-1) : 0, "] (the input's last dimension), got ", weight.sizes(),
              " for an input of ", input.sizes());
  TORCH_CHECK(!at::GradMode::is_enabled() || !(input.requires_grad() || weight.requires_grad()),
              "decodeRmsNorm: inference only (no autograd); use rmsNorm for training");
  TORCH_CHECK(eps >= 0, "decodeRmsNorm: eps must be >= 0, got ", eps);
  const at::Tensor x = input.contiguous();
  const at::Tensor w = weight.contiguous();
  at::Tensor out = at::empty(input.sizes(), input.options());
  const int64_t n = weight.size(0);
  if (out.numel() == 0) return out;
  const int64_t rows = out.numel() / n;
  const float e = static_cast<float>(eps);
  auto run = [&](const auto* xp, const auto* wp, auto* yp) {
    // rows of a few hundred values: split only where there are many (a prefill), ~16K values per task
    at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / n), [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) rmsNormRow(xp + r * n, wp, yp + r * n, n, e);
    });
  };
  withElements(dtype, run, x, w, out);
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// decodeRotary(x [B, H, T, d], cos [B | 1, 1, T, d], sin [B | 1, 1, T, d]) -> x * cos + roll(x, d / 2) * sin
// Rotary embedding as src/model/rope.ts's applyRotary computes it (sin carries rotate_half's sign), in one pass
// instead of ATen's mul, roll (two narrows and a cat), mul and add. Plain float32 products and sums, each rounded as
// ATen's mul and add round them (no FMA: these functions are compiled without it), so the bits equal applyRotary's;
// in bfloat16 (x, cos and sin alike) each product and the sum are rounded to bf16, as ATen's bf16 ops compute in
// float32 and round their result. The output has the strides ATen's elementwise ops would give (empty_like: x's
// order of dimensions, dense).
// a product as the tensor op of element type T gives it: float32 as it is, bf16 rounded (and read back as float32)
template <typename T>
TRT_AVX2_NO_FMA static inline __m256 roundedProduct(__m256 a, __m256 b) {
  const __m256 p = _mm256_mul_ps(a, b);
  if constexpr (std::is_same_v<T, float>) return p;
  else return roundedToBf16(p);
}
template <typename T>
static inline float roundedProduct1(float a, float b) {
  if constexpr (std::is_same_v<T, float>) return a * b;
  else return widen(narrowBf16(a * b));
}
template <typename T>
TRT_AVX2_NO_FMA static void rotaryRow(const T* x, const T* c, const T* s, T* y, int64_t half) {
  int64_t j = 0;
  for (; j + 8 <= half; j += 8) {
    const __m256 lo = load8(x + j), hi = load8(x + half + j);
    store8(y + j, _mm256_add_ps(roundedProduct<T>(lo, load8(c + j)), roundedProduct<T>(hi, load8(s + j))));
    store8(y + half + j,
           _mm256_add_ps(roundedProduct<T>(hi, load8(c + half + j)), roundedProduct<T>(lo, load8(s + half + j))));
  }
  for (; j < half; ++j) {
    const float lo = widen(x[j]), hi = widen(x[half + j]);
    store1(y + j, roundedProduct1<T>(lo, widen(c[j])) + roundedProduct1<T>(hi, widen(s[j])));
    store1(y + half + j, roundedProduct1<T>(hi, widen(c[half + j])) + roundedProduct1<T>(lo, widen(s[half + j])));
  }
}

static at::Tensor decodeRotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  RECORD_FUNCTION("trinity::decode_rotary", std::vector<c10::IValue>());
  TORCH_CHECK(cpuSupported(), "decodeRotary: this CPU lacks AVX2/FMA (check packedLinearSupported() first)");
  const at::ScalarType dtype = x.scalar_type();
  for (const at::Tensor* t : {&x, &cos, &sin}) {
    TORCH_CHECK(t->device().is_cpu() && (dtype == at::kFloat || dtype == at::kBFloat16) &&
                    t->scalar_type() == dtype && t->dim() == 4,
                "decodeRotary: x, cos and sin must be 4-d CPU tensors, all float32 or all bfloat16, got ", t->sizes(),
                " ", t->scalar_type(), " on ", t->device(), " (x: ", x.scalar_type(), ")");
    TORCH_CHECK(t->stride(3) == 1 || t->size(3) <= 1, "decodeRotary: the last dimension of x, cos and sin must be contiguous");
  }
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), d = x.size(3);
  TORCH_CHECK(d % 2 == 0, "decodeRotary: the head size must be even, got ", d);
  for (const at::Tensor* t : {&cos, &sin})
    TORCH_CHECK((t->size(0) == B || t->size(0) == 1) && t->size(1) == 1 && t->size(2) == T && t->size(3) == d,
                "decodeRotary: cos and sin must be [", B, " or 1, 1, ", T, ", ", d, "], got ", t->sizes());
  TORCH_CHECK(!at::GradMode::is_enabled() || !(x.requires_grad() || cos.requires_grad() || sin.requires_grad()),
              "decodeRotary: inference only (no autograd)");
  at::Tensor out = at::empty_like(x, at::MemoryFormat::Preserve);
  if (out.numel() == 0) return out;
  const int64_t cb = cos.size(0) == 1 ? 0 : cos.stride(0), sb = sin.size(0) == 1 ? 0 : sin.stride(0);
  const int64_t rows = B * H * T;
  auto run = [&](const auto* xp, const auto* cp, const auto* sp, auto* yp) {
    at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / d), [&](int64_t first, int64_t last) {
      for (int64_t r = first; r < last; ++r) {
        const int64_t b = r / (H * T), h = (r / T) % H, t = r % T;
        rotaryRow(xp + b * x.stride(0) + h * x.stride(1) + t * x.stride(2), cp + b * cb + t * cos.stride(2),
                  sp + b * sb + t * sin.stride(2), yp + b * out.stride(0) + h * out.stride(1) + t * out.stride(2),
                  d / 2);
      }
    });
  };
  withElements(dtype, run, x, cos, sin, out);
  return out;
}

#else
static bool cpuSupported() { return false; }
static bool cpuHasAvx512() { return false; }
static bool cpuHasAvx512Bf16() { return false; }
static at::Tensor decodeAttention(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                  const std::optional<at::Tensor>&, double) {
  TORCH_CHECK(false, "decodeAttention: this build has no x86 kernels (check packedLinearSupported() first)");
}
static bool cpuBf16Matmul() { return false; }
static bool cpuBlasHoldsToAvx2() { return false; }
static at::Tensor decodeRmsNorm(const at::Tensor&, const at::Tensor&, double) {
  TORCH_CHECK(false, "decodeRmsNorm: this build has no x86 kernels (check packedLinearSupported() first)");
}
static at::Tensor decodeRotary(const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  TORCH_CHECK(false, "decodeRotary: this build has no x86 kernels (check packedLinearSupported() first)");
}
#endif

// ---------------------------------------------------------------------------------------------------------------
// writeCacheRows(buffer [S, H, L, D], slots int64 [B], positions int64 [B, T], src [B, H, T, D]): in place,
//   buffer[slots[b], h, positions[b, t], :] = src[b, h, t, :]
// The KV cache's write of a step's new keys and values (and, as [S, 1, L, 1], of its key-valid flags): ATen's
// index_put_ with index tensors costs ~6 us a call at decode shapes (its indexing iterator set up for a few hundred
// bytes), and a decode step makes 2 x layers + 1 of them. Plain copies of D elements (any dtype, the bits as they
// are), so the result equals index_put_'s; indices out of range are an error naming them. Any CPU.
static void writeCacheRows(const at::Tensor& buffer, const at::Tensor& slots, const at::Tensor& positions,
                           const at::Tensor& source) {
  RECORD_FUNCTION("trinity::write_cache_rows", std::vector<c10::IValue>());
  TORCH_CHECK(buffer.device().is_cpu() && slots.device().is_cpu() && positions.device().is_cpu() &&
                  source.device().is_cpu(),
              "writeCacheRows: every tensor must be on the CPU (elsewhere use indexPut_)");
  TORCH_CHECK(buffer.dim() == 4, "writeCacheRows: the buffer must be [slots, heads, length, width], got ", buffer.sizes());
  const int64_t S = buffer.size(0), H = buffer.size(1), L = buffer.size(2), D = buffer.size(3);
  TORCH_CHECK(buffer.stride(3) == 1 || D <= 1, "writeCacheRows: the buffer's last dimension must be contiguous");
  TORCH_CHECK(slots.scalar_type() == at::kLong && slots.dim() == 1, "writeCacheRows: slots must be int64 [B], got ",
              slots.scalar_type(), " ", slots.sizes());
  const int64_t B = slots.size(0);
  TORCH_CHECK(positions.scalar_type() == at::kLong && positions.dim() == 2 && positions.size(0) == B,
              "writeCacheRows: positions must be int64 [", B, ", T], got ", positions.scalar_type(), " ",
              positions.sizes());
  const int64_t T = positions.size(1);
  TORCH_CHECK(source.scalar_type() == buffer.scalar_type(), "writeCacheRows: the source is ", source.scalar_type(),
              " but the buffer ", buffer.scalar_type());
  TORCH_CHECK(source.dim() == 4 && source.size(0) == B && source.size(1) == H && source.size(2) == T &&
                  source.size(3) == D,
              "writeCacheRows: the source must be [", B, ", ", H, ", ", T, ", ", D, "], got ", source.sizes());
  TORCH_CHECK(!at::GradMode::is_enabled() || !(buffer.requires_grad() || source.requires_grad()),
              "writeCacheRows: no autograd (a cache write); detach the source");
  const at::Tensor src = source.stride(3) == 1 || D <= 1 ? source : source.contiguous();
  const at::Tensor slot = slots.contiguous();
  const at::Tensor pos = positions.contiguous();
  const int64_t* sp = slot.data_ptr<int64_t>();
  const int64_t* pp = pos.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    TORCH_CHECK(sp[b] >= 0 && sp[b] < S, "writeCacheRows: slots[", b, "] = ", sp[b], " is out of range (", S, " slots)");
    for (int64_t t = 0; t < T; ++t)
      TORCH_CHECK(pp[b * T + t] >= 0 && pp[b * T + t] < L, "writeCacheRows: positions[", b, ", ", t, "] = ",
                  pp[b * T + t], " is out of range (length ", L, ")");
  }
  if (B * H * T * D == 0) return;
  const int64_t item = buffer.element_size();
  char* to = static_cast<char*>(buffer.data_ptr());
  const char* from = static_cast<const char*>(src.data_ptr());
  const size_t bytes = static_cast<size_t>(D * item);
  // rows of D elements, a few hundred bytes each: split only where there are many (a prefill)
  at::parallel_for(0, B * H * T, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, D * item)), [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const int64_t b = r / (H * T), h = (r / T) % H, t = r % T;
      std::memcpy(to + (sp[b] * buffer.stride(0) + h * buffer.stride(1) + pp[b * T + t] * buffer.stride(2)) * item,
                  from + (b * src.stride(0) + h * src.stride(1) + t * src.stride(2)) * item, bytes);
    }
  });
}

// Products of two CPU bfloat16 tensors where libtorch's bf16 product is a reference loop (cpuBf16Matmul false): in
// float32 on widened copies (exact), the result rounded to bf16 once, as oneDNN's bf16 product accumulates in float32
// and rounds once. Autograd goes through the casts, so a training step's backward products run in float32 too.
// (x86 only: elsewhere libtorch's bf16 product is left as it is, unmeasured.)
static bool slowBf16Product(const at::Tensor& a, const at::Tensor& b) {
  return TRT_PACKED_LINEAR && a.scalar_type() == at::kBFloat16 && b.scalar_type() == at::kBFloat16 &&
         a.device().is_cpu() && b.device().is_cpu() && !cpuBf16Matmul();
}
// op(a, b), on widened copies where slowBf16Product
template <class Op>
static at::Tensor widenedWhereSlow(const at::Tensor& a, const at::Tensor& b, Op op) {
  if (!slowBf16Product(a, b)) return op(a, b);
  return op(a.to(at::kFloat), b.to(at::kFloat)).to(at::kBFloat16);
}
// (a bias of another dtype is left to at::linear's own error, as on every other CPU)
at::Tensor productLinear(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias) {
  const bool hasBias = bias.has_value() && bias->defined();
  if (!slowBf16Product(x, weight) || (hasBias && bias->scalar_type() != at::kBFloat16)) return at::linear(x, weight, bias);
  const std::optional<at::Tensor> wideBias = hasBias ? std::optional<at::Tensor>(bias->to(at::kFloat)) : std::nullopt;
  return at::linear(x.to(at::kFloat), weight.to(at::kFloat), wideBias).to(at::kBFloat16);
}
at::Tensor productMatmul(const at::Tensor& a, const at::Tensor& b) {
  return widenedWhereSlow(a, b, [](const at::Tensor& u, const at::Tensor& v) { return at::matmul(u, v); });
}
at::Tensor productMm(const at::Tensor& a, const at::Tensor& b) {
  return widenedWhereSlow(a, b, [](const at::Tensor& u, const at::Tensor& v) { return at::mm(u, v); });
}
at::Tensor productBmm(const at::Tensor& a, const at::Tensor& b) {
  return widenedWhereSlow(a, b, [](const at::Tensor& u, const at::Tensor& v) { return at::bmm(u, v); });
}

// The path packedLinear takes: AVX-512 where the CPU has it, else AVX2, and for bfloat16 AVX512-BF16 dot products
// where present. setPackedLinearIsa can hold it to a narrower one, to compare the paths on one machine.
enum class Isa { Avx2 = 0, Avx512 = 1, Avx512Bf16 = 2 };
static std::atomic<int> widestIsa{static_cast<int>(Isa::Avx512Bf16)};
static Isa packedIsa(bool bf16) {
  const int widest = widestIsa.load(std::memory_order_relaxed);
  if (bf16 && widest >= static_cast<int>(Isa::Avx512Bf16) && cpuHasAvx512Bf16()) return Isa::Avx512Bf16;
  if (widest >= static_cast<int>(Isa::Avx512) && cpuHasAvx512()) return Isa::Avx512;
  return Isa::Avx2;
}

static void checkCpuFloating(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "packedLinear: ", what, " must be on the CPU, got ", t.device());
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16, "packedLinear: ", what,
              " must be float32 or bfloat16, got ", t.scalar_type());
}

// packed[p][k][j] = weight[16p + j][k] for one element type (bfloat16 moves as its 16 bits)
template <typename T>
static void packInto(const T* src, T* dst, int64_t N, int64_t K, int64_t rowStride, int64_t colStride) {
  at::parallel_for(0, (N + kPanel - 1) / kPanel, 1, [&](int64_t first, int64_t last) {
    for (int64_t p = first; p < last; ++p) {
      const int64_t cols = std::min(kPanel, N - p * kPanel);
      for (int64_t k = 0; k < K; ++k) {
        T* to = dst + (p * K + k) * kPanel;
        const T* from = src + p * kPanel * rowStride + k * colStride;
        for (int64_t j = 0; j < cols; ++j) to[j] = from[j * rowStride];
      }
    }
  });
}

// Packs `weight` into `out` ([ceil(N / 16), K, 16], its dtype; rows past N stay as they are: zeros).
static void packLinearInto(const at::Tensor& weight, const at::Tensor& out) {
  TORCH_CHECK(cpuSupported(), "packLinear: this CPU lacks AVX2/FMA (check packedLinearSupported() first)");
  checkCpuFloating(weight, "the weight");
  TORCH_CHECK(weight.dim() == 2, "packLinear: the weight must be [out, in], got ", weight.sizes());
  const int64_t N = weight.size(0), K = weight.size(1);
  const int64_t count = (N + kPanel - 1) / kPanel;
  TORCH_CHECK(out.dim() == 3 && out.size(0) == count && out.size(1) == K && out.size(2) == kPanel && out.is_contiguous() &&
                  out.scalar_type() == weight.scalar_type() && out.device().is_cpu(),
              "packLinear_: the packed weight must be [", count, ", ", K, ", 16] ", weight.scalar_type(),
              " (from packLinear of a weight of this shape), got ", out.sizes(), " ", out.scalar_type());
  const at::Tensor w = weight.detach();
  if (w.scalar_type() == at::kFloat)
    packInto(w.data_ptr<float>(), out.data_ptr<float>(), N, K, w.stride(0), w.stride(1));
  else
    packInto(reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>()),
             reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>()), N, K, w.stride(0), w.stride(1));
}

static at::Tensor packLinearWeight(const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2, "packLinear: the weight must be [out, in], got ", weight.sizes());
  const int64_t count = (weight.size(0) + kPanel - 1) / kPanel;
  // one pass over the weight in whatever strides it has (the inference layout's are column-major), into the only
  // allocation: no temporaries the size of the weight (a 0.5B model's LM head is 545 MB)
  at::Tensor out = at::zeros({count, weight.size(1), kPanel}, weight.options().requires_grad(false));
  packLinearInto(weight, out);
  return out;
}

static at::Tensor packedLinear(const at::Tensor& input, const at::Tensor& packed, const std::optional<at::Tensor>& bias,
                               int64_t N) {
  RECORD_FUNCTION("trinity::packed_linear", std::vector<c10::IValue>());  // a row of its own in torch.profile
  TORCH_CHECK(cpuSupported(), "packedLinear: this CPU lacks AVX2/FMA (check packedLinearSupported() first)");
  checkCpuFloating(input, "the input");
  checkCpuFloating(packed, "the packed weight");
  TORCH_CHECK(packed.scalar_type() == input.scalar_type(), "packedLinear: the input is ", input.scalar_type(),
              " but the packed weight ", packed.scalar_type());
  TORCH_CHECK(packed.dim() == 3 && packed.size(2) == kPanel && packed.is_contiguous(),
              "packedLinear: the packed weight must come from packLinear ([panels, in, 16]), got ", packed.sizes());
  const int64_t K = packed.size(1);
  TORCH_CHECK(input.dim() >= 1 && input.size(-1) == K, "packedLinear: the input's last dimension must be ", K,
              " (the weight's in features), got ", input.sizes());
  TORCH_CHECK(N > (packed.size(0) - 1) * kPanel && N <= packed.size(0) * kPanel, "packedLinear: ", N,
              " out features do not match ", packed.size(0), " panels of ", kPanel);
  if (bias) {
    checkCpuFloating(*bias, "the bias");
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == N, "packedLinear: the bias must be [", N, "], got ",
                bias->sizes());
  }
  TORCH_CHECK(!input.requires_grad() && !packed.requires_grad() && !(bias && bias->requires_grad()),
              "packedLinear: inference only (no autograd); use linear for training");
  std::vector<int64_t> outShape(input.sizes().begin(), input.sizes().end());
  outShape.back() = N;
  at::Tensor out = at::empty(outShape, input.options());
  if (out.numel() == 0) return out;  // no rows, or N == 0
  const int64_t M = out.numel() / N;  // rows: every dimension of the input but the last
  if (K == 0) return bias ? out.copy_(bias->expand(outShape)) : out.zero_();
#if TRT_PACKED_LINEAR
  // float32 bias and accumulators; float32 inputs, except on the dot-product path (bf16 -> float32 is exact); a bf16
  // output is rounded once at the end
  const bool bf16 = packed.scalar_type() == at::kBFloat16;
  const Isa isa = packedIsa(bf16);
  const bool dot = isa == Isa::Avx512Bf16;
  const at::Tensor x = dot ? input.contiguous() : input.to(at::kFloat).contiguous();
  const at::Tensor b = bias ? bias->to(at::kFloat).contiguous() : at::Tensor();
  at::Tensor y = bf16 ? at::empty(outShape, input.options().dtype(at::kFloat)) : out;
  const float* xp = dot ? nullptr : x.data_ptr<float>();
  const uint16_t* xh = dot ? reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>()) : nullptr;
  const float* bp = bias ? b.data_ptr<float>() : nullptr;
  float* yp = y.data_ptr<float>();
  const uint16_t* half = bf16 ? reinterpret_cast<const uint16_t*>(packed.data_ptr<at::BFloat16>()) : nullptr;
  const float* full = bf16 ? nullptr : packed.data_ptr<float>();
  const int64_t count = packed.size(0);
  for (int64_t m = 0; m < M; m += kRowChunk) {
    const int64_t rows = std::min(kRowChunk, M - m);
    at::parallel_for(0, count, 4, [&](int64_t first, int64_t last) {
      float* yr = yp + m * N;
      if (dot) panelsDot(xh + m * K, rows, K, half, bp, yr, N, first, last);
      else if (isa == Isa::Avx512 && bf16) panels512(xp + m * K, rows, K, half, bp, yr, N, first, last);
      else if (isa == Isa::Avx512) panels512(xp + m * K, rows, K, full, bp, yr, N, first, last);
      else if (bf16) panels(xp + m * K, rows, K, half, bp, yr, N, first, last);
      else panels(xp + m * K, rows, K, full, bp, yr, N, first, last);
    });
  }
  if (bf16) out.copy_(y);
#endif
  return out;
}

static Napi::Value packLinear(const Napi::CallbackInfo& info) { return wrap(info.Env(), packLinearWeight(unwrap(info[0]))); }
// packLinear_(weight, packed): packs again into an existing packed weight (a captured step that reads it stays valid).
static Napi::Value packLinear_(const Napi::CallbackInfo& info) {
  packLinearInto(unwrap(info[0]), unwrap(info[1]));
  return info.Env().Undefined();
}
template <class Info>
static at::Tensor packedLinearOp(const Info& info) {
  return packedLinear(unwrap(info[0]), unwrap(info[1]), unwrapOptional(info[2]), toInt(info[3]));
}
TRT_ONE_TENSOR_BINDING(packedLinearBinding, packedLinearOp)
template <class Info>
static at::Tensor decodeAttentionOp(const Info& info) {
  return decodeAttention(unwrap(info[0]), unwrap(info[1]), unwrap(info[2]), unwrapOptional(info[3]), toDouble(info[4]));
}
TRT_ONE_TENSOR_BINDING(decodeAttentionBinding, decodeAttentionOp)
template <class Info>
static at::Tensor decodeRmsNormOp(const Info& info) {
  return decodeRmsNorm(unwrap(info[0]), unwrap(info[1]), toDouble(info[2]));
}
TRT_ONE_TENSOR_BINDING(decodeRmsNormBinding, decodeRmsNormOp)
template <class Info>
static at::Tensor decodeRotaryOp(const Info& info) {
  return decodeRotary(unwrap(info[0]), unwrap(info[1]), unwrap(info[2]));
}
TRT_ONE_TENSOR_BINDING(decodeRotaryBinding, decodeRotaryOp)
template <class Info>
static bool writeCacheRowsOp(const Info& info) {
  writeCacheRows(unwrap(info[0]), unwrap(info[1]), unwrap(info[2]), unwrap(info[3]));
  return true;
}
static void writeCacheRowsBindingReplay(const ReplayInfo& info, std::vector<at::Tensor>&) { writeCacheRowsOp(info); }
TRT_RECORDED_BINDING(writeCacheRowsBinding, writeCacheRowsOp, noOutputs, undefinedResult)
static Napi::Value packedLinearSupported(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), cpuSupported());
}
static Napi::Value blasHoldsToAvx2(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), cpuBlasHoldsToAvx2());
}
static Napi::Value cpuHasBf16Matmul(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), cpuBf16Matmul());
}

static const char* isaName(Isa isa) {
  return isa == Isa::Avx512Bf16 ? "avx512bf16" : isa == Isa::Avx512 ? "avx512" : "avx2";
}
// packedLinearIsa(dtype) -> 'avx512bf16' | 'avx512' | 'avx2' | 'none': the path packedLinear takes on this CPU now
// for 'float32' or 'bfloat16' weights.
static Napi::Value packedLinearIsa(const Napi::CallbackInfo& info) {
  const std::string dtype = toText(info[0]);
  if (dtype != "float32" && dtype != "bfloat16")
    throw Napi::RangeError::New(info.Env(), "packedLinearIsa: expected 'float32' or 'bfloat16', got \"" + dtype + "\"");
  if (!cpuSupported()) return Napi::String::New(info.Env(), "none");
  return Napi::String::New(info.Env(), isaName(packedIsa(dtype == "bfloat16")));
}
// setPackedLinearIsa('auto' | 'avx512' | 'avx2'): the widest path packedLinear may take ('avx512': AVX-512 FMAs on
// widened bf16 weights, no dot products; 'avx2': AVX2 registers even where AVX-512 is present).
static Napi::Value setPackedLinearIsa(const Napi::CallbackInfo& info) {
  const std::string isa = toText(info[0]);
  if (isa != "auto" && isa != "avx512" && isa != "avx2")
    throw Napi::RangeError::New(info.Env(),
                                "setPackedLinearIsa: expected 'auto', 'avx512' or 'avx2', got \"" + isa + "\"");
  widestIsa.store(static_cast<int>(isa == "auto" ? Isa::Avx512Bf16 : isa == "avx512" ? Isa::Avx512 : Isa::Avx2));
  return info.Env().Undefined();
}

// setMkldnnEnabled(on) / mkldnnEnabled(): libtorch's oneDNN switch (torch.backends.mkldnn.enabled). Off, bf16
// products take libtorch's reference loops, as on a CPU without AVX-512: benchmarks run such a CPU with it.
static Napi::Value setMkldnnEnabled(const Napi::CallbackInfo& info) {
  at::globalContext().setUserEnabledMkldnn(toBool(info[0]));
  return info.Env().Undefined();
}
static Napi::Value mkldnnEnabled(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), at::globalContext().userEnabledMkldnn());
}

void registerKernels(Napi::Object exports) {
  TRT_EXPORT(exports, "packLinear", packLinear);
  TRT_EXPORT(exports, "packLinear_", packLinear_);
  TRT_EXPORT_RECORDED(exports, "packedLinear", packedLinearBinding);
  TRT_EXPORT_PASSIVE(exports, "packedLinearSupported", packedLinearSupported);
  TRT_EXPORT_RECORDED(exports, "decodeAttention", decodeAttentionBinding);
  TRT_EXPORT_RECORDED(exports, "decodeRmsNorm", decodeRmsNormBinding);
  TRT_EXPORT_RECORDED(exports, "decodeRotary", decodeRotaryBinding);
  TRT_EXPORT_RECORDED(exports, "writeCacheRows", writeCacheRowsBinding);
  TRT_EXPORT_PASSIVE(exports, "cpuHasBf16Matmul", cpuHasBf16Matmul);
  TRT_EXPORT_PASSIVE(exports, "blasHoldsToAvx2", blasHoldsToAvx2);
  TRT_EXPORT_PASSIVE(exports, "packedLinearIsa", packedLinearIsa);
  TRT_EXPORT(exports, "setPackedLinearIsa", setPackedLinearIsa);
  TRT_EXPORT(exports, "setMkldnnEnabled", setMkldnnEnabled);
  TRT_EXPORT_PASSIVE(exports, "mkldnnEnabled", mkldnnEnabled);
}

}  // namespace trt
