// The CPU as Linux reports it (/proc/cpuinfo; empty elsewhere), for tests that depend on its vendor or features.
import { existsSync, readFileSync } from 'node:fs';

const text = existsSync('/proc/cpuinfo') ? readFileSync('/proc/cpuinfo', 'utf8') : '';

/** The CPU's feature flags. */
export const cpuFlags = new Set((/^flags\s*:(.*)$/m.exec(text)?.[1] ?? '').trim().split(/\s+/));

/** An Intel CPU (MKL's own vendor check says yes only there). */
export const cpuIsIntel = /^vendor_id\s*:\s*GenuineIntel$/m.test(text);

/** What MKL's AVX-512 code uses (native/src/blas.cpp cpuHasMklAvx512). */
export const cpuHasMklAvx512 = ['avx512f', 'avx512cd', 'avx512bw', 'avx512dq', 'avx512vl'].every((f) => cpuFlags.has(f));
