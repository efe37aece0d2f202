// The CPU as Linux reports it (bench/harness.ts cpuInfo), for tests that depend on its vendor or features.
import { cpuInfo } from '../../bench/harness.js';

const cpu = cpuInfo();

/** An Intel CPU (MKL's own vendor check says yes only there). */
export const cpuIsIntel = cpu.intel;

/** What MKL's AVX-512 code uses (native/src/blas.cpp cpuHasMklAvx512). */
export const cpuHasMklAvx512 = ['avx512f', 'avx512cd', 'avx512bw', 'avx512dq', 'avx512vl'].every((f) => cpu.flags.has(f));
