#!/usr/bin/env node
// The `trinity` command. Sources are TypeScript, run through tsx (no build step).
import { register } from 'tsx/esm/api';

register();
await import('../src/cli/main.ts');
