// torch.scopeSteps (src/torch/tensor.ts): scope() over a generator. The tensors a program creates between its yields
// belong to its own scope, not to the code that drives it; when it returns they are freed except its return value,
// and when it is closed early all of them are.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as torch from '../../src/torch/index.js';

/** Creates a tensor, pauses, creates another, returns their sum; `made` records every tensor it created. */
function* program(made: torch.Tensor[]): Generator<string, torch.Tensor, void> {
  const a = torch.ones([2]);
  made.push(a);
  yield 'paused';
  const b = torch.ones([2]).mul(2);
  made.push(b);
  const sum = a.add(b);
  made.push(sum);
  return sum;
}

test('scopeSteps frees what the program made except its result, and the driver keeps its own tensors', () => {
  const made: torch.Tensor[] = [];
  let driverTensor: torch.Tensor | null = null;
  const result = torch.scope(() => {
    const steps = torch.scopeSteps(program(made));
    let next = steps.next();
    while (next.done !== true) {
      driverTensor = torch.keep(torch.zeros([1])); // made by the driver between two yields: not the program's
      next = steps.next();
    }
    return next.value;
  });
  assert.deepEqual([...(result.toTypedArray() as Float32Array)], [3, 3]);
  assert.ok(made[0]?.isDisposed && made[1]?.isDisposed, 'the program temporaries are freed');
  assert.equal(made[2], result);
  assert.equal((driverTensor as torch.Tensor | null)?.isDisposed, false);
  result.dispose();
  (driverTensor as torch.Tensor | null)?.dispose();
});

test('scopeSteps closed early (return()) frees everything the program made', () => {
  const made: torch.Tensor[] = [];
  const steps = torch.scopeSteps(program(made));
  assert.equal(steps.next().value, 'paused');
  steps.return(undefined as never);
  assert.equal(made.length, 1);
  assert.ok(made[0]?.isDisposed);
});
