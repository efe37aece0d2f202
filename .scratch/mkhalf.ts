import { writeFileSync } from 'node:fs';
import { makeAdditionData } from '../examples/quickstart/make-data.js';
const d = makeAdditionData(0);
const pool = [...d.sft, ...d.train];
const half = pool.filter((r) => Number(r.prompt.slice(3, 5)) < Number(process.argv[2] ?? 50)).slice(0, 2000);
writeFileSync('/tmp/exp/sft-half.jsonl', half.map((r) => JSON.stringify(r)).join('\n') + '\n');
console.log(half.length, half.slice(0, 3));
