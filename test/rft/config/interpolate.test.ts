// ${...} interpolation as Trinity-RFT's OmegaConf reads it (src/rft/config/interpolate.ts): nested defaults, key
// references (absolute and relative), cycles; and YAML merge keys (`<<`), which Trinity's loader accepts.
// biome-ignore-all lint/suspicious/noTemplateCurlyInString: the strings are config text, ${...} written as in a file
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ConfigError, type ParseConfigOptions, parseConfig } from '../../../src/rft/run/config/index.js';

const MODEL = 'model: {model_path: /m, max_model_len: 64}\n';
/** Parses `text` with a taskset (--set), no environment unless given. */
const parse = (text: string, options: ParseConfigOptions = {}) =>
  parseConfig(text, {
    env: {},
    cwd: '/',
    ...options,
    overrides: ['buffer.explorer_input.taskset.path=/t', ...(options.overrides ?? [])],
  });

function problemsOf(text: string, options: ParseConfigOptions = {}): string[] {
  try {
    parse(text, options);
  } catch (error) {
    assert.ok(error instanceof ConfigError, String(error));
    return error.problems.map((p) => `${p.path}: ${p.message}`);
  }
  assert.fail('the config loaded');
}

describe('config interpolation', () => {
  it('a nested default resolves as OmegaConf resolves it: ${oc.env:X,${oc.env:Y,z}}', () => {
    const text = `${MODEL}name: \${oc.env:X,\${oc.env:Y,z}}\nproject: a-\${oc.env:X,\${Y:-b}}-c\n`;
    assert.equal(parse(text).name, 'z');
    assert.equal(parse(text, { env: { Y: 'y' } }).name, 'y');
    assert.equal(parse(text, { env: { X: 'x', Y: 'y' } }).name, 'x');
    assert.equal(parse(text).project, 'a-b-c');
    // a default that is not used is not resolved: its unset variable is no problem
    assert.equal(parse(`${MODEL}name: \${oc.env:X,\${oc.env:UNSET}}\n`, { env: { X: 'x' } }).name, 'x');
    assert.deepEqual(problemsOf(`${MODEL}name: \${oc.env:X,\${oc.env:UNSET}}\n`), [
      "name: environment variable UNSET is not set (in '${oc.env:UNSET}'); set it or give a default: ${UNSET:-value}",
    ]);
  });

  it('${a.b} is a reference to another key (absolute path, list indices, relative ${.x}), typed when alone', () => {
    const text = `${MODEL}name: run-\${model.max_model_len}
buffer:
  batch_size: \${.train_batch_size}
  train_batch_size: 6
  explorer_input:
    taskset:
      path: /t
      rollout_args:
        max_tokens: \${model.max_model_len}
      workflow_args:
        n: \${...eval_tasksets.0.name}
    eval_tasksets: [{name: e0, path: /e}]
`;
    const config = parse(text);
    assert.equal(config.name, 'run-64');
    assert.equal(config.buffer.batch_size, 6);
    const taskset = config.buffer.explorer_input.tasksets[0];
    assert.equal(taskset?.rollout_args.max_tokens, 64);
    assert.deepEqual(taskset?.workflow_args, { n: 'e0' });
  });

  it('a reference reads a referenced interpolation resolved, and reads --set values', () => {
    const text = `${MODEL}name: \${project}\nproject: \${oc.env:P,p}\n`;
    // `${project}` is the shell's ${VAR} form (one name, no dot): an environment variable, as before
    assert.equal(parse(text, { env: { project: 'env' } }).name, 'env');
    const ref = `${MODEL}name: \${buffer.total_epochs}-\${model.max_model_len}\nbuffer:\n  total_epochs: \${oc.env:E,3}\n`;
    assert.equal(parse(ref).name, '3-64');
    assert.equal(parse(ref, { overrides: ['model.max_model_len=32'] }).name, '3-32');
  });

  it('a reference to an unset key says it is a config reference, not an environment variable; a cycle is named', () => {
    const [unset] = problemsOf(`${MODEL}name: \${trainer.missing}\n`);
    assert.match(
      unset ?? '',
      /^name: config reference '\$\{trainer\.missing\}' names key trainer\.missing, which the config does not set/,
    );
    assert.doesNotMatch(unset ?? '', /environment variable trainer/);
    const cycle = problemsOf(`${MODEL}buffer:\n  batch_size: \${buffer.train_batch_size}\n  train_batch_size: \${.batch_size}\n`);
    assert.ok(
      cycle.some((p) => /is a cycle: buffer\.batch_size → buffer\.train_batch_size → buffer\.batch_size/.test(p)),
      cycle.join('\n'),
    );
    assert.equal(parse(`${MODEL}name: "$\${a.b}"\n`).name, '${a.b}');
  });

  it('inside trainer.trainer_config a reference to a veRL default the file does not set stays as written', () => {
    // upstream ppo_countdown_megatron: the critic's ppo_epochs reads the actor's, which only veRL's defaults set
    const verl = `${MODEL}trainer:
  trainer_config:
    actor_rollout_ref: {actor: {use_dynamic_bsz: true}}
    critic:
      ppo_epochs: \${trainer.trainer_config.actor_rollout_ref.actor.ppo_epochs}
      use_dynamic_bsz: \${trainer.trainer_config.actor_rollout_ref.actor.use_dynamic_bsz}
`;
    const config = parse(verl);
    const critic = config.trinity_keys.ignored.find((k) => k.path === 'trainer.trainer_config')?.value as {
      critic: Record<string, unknown>;
    };
    assert.equal(critic.critic.ppo_epochs, '${trainer.trainer_config.actor_rollout_ref.actor.ppo_epochs}');
    assert.equal(critic.critic.use_dynamic_bsz, true, 'a key the file sets is still resolved');
    // outside that section, or pointing out of it, an unset key is still a problem
    assert.equal(problemsOf(`${MODEL}name: \${trainer.trainer_config.actor_rollout_ref.actor.ppo_epochs}\n`).length, 1);
    assert.equal(problemsOf(`${MODEL}trainer: {trainer_config: {critic: {x: \${trainer.missing}}}}\n`).length, 1);
  });
});

describe('YAML merge keys', () => {
  const text = (temperature: string) => `${MODEL}buffer:
  explorer_input:
    taskset:
      path: /t
      rollout_args: &rollout
        temperature: ${temperature}
        max_tokens: 32
    eval_tasksets:
      - name: e
        path: /e
        rollout_args:
          <<: *rollout
          max_tokens: 16
`;

  it('`<<: *base` merges a mapping, as Trinity-RFT reads it; the keys written beside it win', () => {
    const config = parse(text('0.5'));
    assert.deepEqual(
      config.buffer.explorer_input.eval_tasksets.map((t) => [t.rollout_args.temperature, t.rollout_args.max_tokens]),
      [[0.5, 16]],
    );
  });

  it('a problem in a merged key is located where the merged mapping wrote it', () => {
    try {
      parse(text('hot'), { file: 'run.yaml' });
      assert.fail('the config loaded');
    } catch (error) {
      assert.ok(error instanceof ConfigError, String(error));
      const merged = error.problems.find((p) => p.path.startsWith('buffer.explorer_input.eval_tasksets.0.'));
      assert.equal(merged?.path, 'buffer.explorer_input.eval_tasksets.0.rollout_args.temperature');
      assert.equal(merged?.source, 'run.yaml:7:9');
    }
  });
});
