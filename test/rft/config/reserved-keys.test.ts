// `__proto__`, `constructor` and `prototype` are never config keys: written in YAML or given with --set (as a path or
// inside a value) they are a problem naming the key and where it was written, and Object.prototype stays untouched.
// Before, `--set __proto__.x=1` wrote x into Object.prototype and a YAML `__proto__:` key was an internal error.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, formatProblem, parseConfig } from '../../../src/rft/run/config/index.js';

const BASE = 'model: {model_path: /m, max_model_len: 64}\nbuffer: {explorer_input: {taskset: {path: /t}}}\n';

function problems(text: string, overrides: string[] = []): string[] {
  try {
    parseConfig(text, { env: {}, cwd: '/tmp', file: 'c.yaml', overrides });
  } catch (error) {
    assert.ok(error instanceof ConfigError, `not a ConfigError: ${String(error)}`);
    return error.problems.map(formatProblem);
  }
  assert.fail('the config was accepted');
}

const polluted = () =>
  ['x', 'y', 'mode', 'model'].filter((key) => (Object.prototype as Record<string, unknown>)[key] !== undefined);

describe('reserved keys', () => {
  it('in YAML, at any depth, name the key path and file:line:column', () => {
    const cases: [string, string][] = [
      [
        `__proto__:\n  x: 1\n${BASE}`,
        "__proto__: '__proto__' is not a config key (a reserved name of JavaScript objects; rename it) (c.yaml:1:1)",
      ],
      [
        `constructor: 1\n${BASE}`,
        "constructor: 'constructor' is not a config key (a reserved name of JavaScript objects; rename it) (c.yaml:1:1)",
      ],
      [
        `${BASE}prototype: {}\n`,
        "prototype: 'prototype' is not a config key (a reserved name of JavaScript objects; rename it) (c.yaml:3:1)",
      ],
      [
        `${BASE}explorer:\n  __proto__: {mode: train}\n`,
        "explorer.__proto__: '__proto__' is not a config key (a reserved name of JavaScript objects; rename it) (c.yaml:4:3)",
      ],
      [
        `model: {model_path: /m, max_model_len: 64}\nbuffer: {explorer_input: {taskset: {path: /t, workflow_args: {constructor: 2}}}}\n`,
        "buffer.explorer_input.taskset.workflow_args.constructor: 'constructor' is not a config key (a reserved name of JavaScript objects; rename it) (c.yaml:2:63)",
      ],
      [
        `${BASE}stages:\n  - stage_name: a\n    __proto__: {x: 1}\n`,
        "stages.0.__proto__: '__proto__' is not a config key (a reserved name of JavaScript objects; rename it) (c.yaml:5:5)",
      ],
    ];
    for (const [text, expected] of cases) assert.deepEqual(problems(text), [expected], text);
    assert.deepEqual(polluted(), []);
  });

  it('in --set paths and values, name the override; Object.prototype is untouched', () => {
    const cases: [string, string][] = [
      [
        '__proto__.x=1',
        "override '__proto__.x=1': '__proto__' is not a config key (a reserved name of JavaScript objects; rename it) (--set __proto__.x=1)",
      ],
      [
        'model.constructor.prototype.y=2',
        "override 'model.constructor.prototype.y=2': 'constructor' is not a config key (a reserved name of JavaScript objects; rename it) (--set model.constructor.prototype.y=2)",
      ],
      [
        'stages.0.__proto__=x',
        "override 'stages.0.__proto__=x': '__proto__' is not a config key (a reserved name of JavaScript objects; rename it) (--set stages.0.__proto__=x)",
      ],
      [
        'buffer={__proto__: {x: 1}}',
        "buffer.__proto__: '__proto__' is not a config key (a reserved name of JavaScript objects; rename it) (--set buffer={__proto__: {x: 1}})",
      ],
      [
        'monitor.monitor_args=[{prototype: 1}]',
        "monitor.monitor_args.0.prototype: 'prototype' is not a config key (a reserved name of JavaScript objects; rename it) (--set monitor.monitor_args=[{prototype: 1}])",
      ],
    ];
    for (const [override, expected] of cases) assert.deepEqual(problems(BASE, [override]), [expected], override);
    assert.deepEqual(polluted(), []);
    assert.equal(({} as Record<string, unknown>).x, undefined);
  });

  it('keys that merely contain the words are ordinary keys', () => {
    const text = `model: {model_path: /m, max_model_len: 64}\nbuffer: {explorer_input: {taskset: {path: /t, workflow_args: {constructor_name: a, my_prototype: b, proto: c}}}}\n`;
    const config = parseConfig(text, { env: {}, cwd: '/tmp' });
    assert.deepEqual(config.buffer.explorer_input.tasksets[0]?.workflow_args, {
      constructor_name: 'a',
      my_prototype: 'b',
      proto: 'c',
    });
  });
});
