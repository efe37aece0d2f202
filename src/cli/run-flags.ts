// The flags of `trinity run` / `trinity bench`, as node:util parseArgs options: one declaration read by the command
// (./main.ts) and by the tests that check the launch files in docs/multinode/ use only flags the command has.
import type { ParseArgsConfig } from 'node:util';

export const RUN_FLAGS = {
  config: { type: 'string' },
  set: { type: 'string', multiple: true },
  'nproc-per-node': { type: 'string' },
  nnodes: { type: 'string' },
  'node-rank': { type: 'string' },
  'master-addr': { type: 'string' },
  'master-port': { type: 'string' },
  help: { type: 'boolean' },
} as const satisfies NonNullable<ParseArgsConfig['options']>;
