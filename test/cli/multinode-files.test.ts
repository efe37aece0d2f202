// The cluster launch files of docs/distributed.md, checked without a cluster (sbatch --test-only and kubectl are not
// here): docs/multinode/*.sbatch's #SBATCH lines are sbatch options with valid values, before the first command; every
// `trinity` command in them and in docs/multinode/pytorchjob.yaml parses with `trinity run`'s own flags (RUN_FLAGS,
// strict) and its config with its --set overrides loads (examples/multinode/run.yaml); the manifest's documents are
// a PyTorchJob (Master 1, Workers, containers named pytorch) and the explorers' StatefulSet.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { test } from 'node:test';
import { parseArgs } from 'node:util';
import YAML from 'yaml';
import { launchPlanFromFlags } from '../../src/cli/launch.js';
import { RUN_FLAGS } from '../../src/cli/run-flags.js';
import { loadConfig } from '../../src/rft/run/config/index.js';

const root = resolve(import.meta.dirname, '../..');
const docs = join(root, 'docs/multinode');

/** Shell words of a script's commands: comments dropped, `\` line continuations joined, quotes removed. */
function shellCommands(script: string): string[][] {
  const commands: string[][] = [];
  const joined = script.replace(/\\\n/g, ' ');
  for (const line of joined.split('\n')) {
    const words: string[] = [];
    let word = '';
    let inWord = false;
    let quote: string | null = null;
    for (const c of line) {
      if (quote !== null) {
        if (c === quote) quote = null;
        else word += c;
      } else if (c === '"' || c === "'") {
        quote = c;
        inWord = true;
      } else if (c === '#' && !inWord) break;
      else if (/\s/.test(c)) {
        if (inWord) words.push(word);
        word = '';
        inWord = false;
      } else {
        word += c;
        inWord = true;
      }
    }
    assert.equal(quote, null, `an unclosed quote in: ${line}`);
    if (inWord) words.push(word);
    if (words.length > 0) commands.push(words);
  }
  return commands;
}

/** The sbatch options the scripts use, with what their values must look like. */
const SBATCH_OPTIONS: Record<string, RegExp> = {
  'job-name': /^[\w.-]+$/,
  nodes: /^[1-9]\d*$/,
  ntasks: /^[1-9]\d*$/,
  'ntasks-per-node': /^[1-9]\d*$/,
  'cpus-per-task': /^[1-9]\d*$/,
  time: /^(\d+-)?\d{1,2}:\d{2}:\d{2}$/,
  output: /^[\w.%-]+$/,
  array: /^\d+(-\d+)?(,\d+(-\d+)?)*$/,
};

/** Checks a `trinity run` command's words (after `trinity`) and loads its config with its overrides. */
function checkTrinityRun(words: string[], env: NodeJS.ProcessEnv, configPath: (given: string) => string) {
  assert.equal(words[0], 'run', words.join(' '));
  const { values } = parseArgs({ args: words.slice(1), options: RUN_FLAGS, strict: true, allowPositionals: false });
  assert.ok(values.config, `no --config in: ${words.join(' ')}`);
  const { config: _, set: __, help: ___, ...launchFlags } = values;
  const plan = launchPlanFromFlags(launchFlags, {});
  const overrides = (values.set ?? []).map((o) => o.replace(/\$\{?(\w+)\}?/g, (_, name: string) => env[name] ?? `<${name}>`));
  const config = loadConfig(configPath(values.config), { env, overrides });
  return { config, plan, overrides };
}

test('the sbatch scripts: #SBATCH options with valid values before any command; srun runs trinity run with its flags', () => {
  const modes: Record<string, string> = {};
  for (const file of ['train.sbatch', 'explore.sbatch']) {
    const script = readFileSync(join(docs, file), 'utf8');
    const lines = script.split('\n');
    assert.equal(lines[0], '#!/bin/bash', file);
    const firstCommand = lines.findIndex((l) => l.trim() !== '' && !l.startsWith('#'));
    const options = new Map<string, string>();
    lines.forEach((line, i) => {
      if (!line.startsWith('#SBATCH')) return;
      // sbatch reads #SBATCH lines only before the script's first command
      assert.ok(i < firstCommand, `${file}:${i + 1}: #SBATCH after the first command`);
      const match = /^#SBATCH --([a-z-]+)=(\S+)$/.exec(line);
      assert.ok(match, `${file}:${i + 1}: not '#SBATCH --option=value': ${line}`);
      const [, name, value] = match as unknown as [string, string, string];
      const pattern = SBATCH_OPTIONS[name];
      assert.ok(pattern, `${file}:${i + 1}: --${name} is not an sbatch option these scripts may use`);
      assert.match(value, pattern, `${file}:${i + 1}: --${name}=${value}`);
      options.set(name, value);
    });
    assert.ok(options.has('job-name') && options.has('nodes'), file);
    const sruns = shellCommands(script).filter((words) => words[0] === 'srun');
    assert.equal(sruns.length, 1, `${file}: one srun`);
    const srun = sruns[0] as string[];
    const at = srun.indexOf('trinity');
    assert.ok(at > 0, `${file}: srun does not run trinity`);
    for (const option of srun.slice(1, at)) assert.match(option, /^--[a-z-]+=\S+$/, `${file}: srun option ${option}`);
    const env = { TRINITY_DB_URL: 'postgresql://trinity:pw@db-host:5432/runs', SLURM_ARRAY_TASK_ID: '1' };
    const { config, plan } = checkTrinityRun(srun.slice(at + 1), env, (given) => join(root, given));
    // one rank per Slurm task: the ranks come from Slurm's variables, not launch flags
    assert.equal(plan, null, file);
    modes[file] = config.mode;
    if (config.mode === 'explore') assert.equal(config.explorer.name, 'explorer-1', file);
  }
  assert.deepEqual(modes, { 'train.sbatch': 'train', 'explore.sbatch': 'explore' });
});

interface Container {
  name: string;
  command: string[];
  args: string[];
  env: { name: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[];
  volumeMounts: { mountPath: string }[];
}
interface PodTemplate {
  spec: { containers: Container[] };
}
interface PyTorchJob {
  apiVersion: string;
  kind: string;
  spec: { pytorchReplicaSpecs: Record<string, { replicas: number; template: PodTemplate }> };
}
interface StatefulSet {
  kind: string;
  spec: { template: PodTemplate };
}

test('the Kubernetes manifest: a PyTorchJob of trainer ranks and a StatefulSet of explorers, running trinity run', () => {
  const documents = YAML.parseAllDocuments(readFileSync(join(docs, 'pytorchjob.yaml'), 'utf8'));
  for (const d of documents) assert.deepEqual(d.errors, [], 'YAML errors');
  const [job, explorers] = documents.map((d) => d.toJS()) as [PyTorchJob, StatefulSet];
  assert.equal(documents.length, 2);
  const env = { TRINITY_DB_URL: 'postgresql://trinity:pw@db-host:5432/runs', POD_NAME: 'trinity-explore-0' };
  const config = (given: string) => {
    assert.equal(given, '/config/run.yaml'); // the config map's mount
    return join(root, 'examples/multinode/run.yaml');
  };
  // Kubernetes expands $(NAME) in args from the container's env
  const expand = (args: string[]) => args.map((a) => a.replace(/\$\((\w+)\)/g, (_, name: string) => `\${${name}}`));

  assert.equal(job.apiVersion, 'kubeflow.org/v1');
  assert.equal(job.kind, 'PyTorchJob');
  const replicas = job.spec.pytorchReplicaSpecs;
  assert.deepEqual(Object.keys(replicas).sort(), ['Master', 'Worker']);
  assert.equal(replicas.Master?.replicas, 1);
  assert.ok((replicas.Worker?.replicas ?? 0) >= 1);
  for (const role of ['Master', 'Worker']) {
    const [container] = (replicas[role] as { template: PodTemplate }).template.spec.containers as [Container];
    assert.equal(container.name, 'pytorch', `${role}: the training operator looks for the container named pytorch`);
    assert.deepEqual(container.command, ['trinity']);
    const { config: loaded, plan } = checkTrinityRun(expand(container.args), env, config);
    assert.equal(loaded.mode, 'train', role);
    assert.equal(plan, null, `${role}: the operator sets RANK and WORLD_SIZE: one rank per pod`);
    const mounts = container.volumeMounts.map((m) => m.mountPath).sort();
    assert.deepEqual(mounts, ['/config', '/shared'], role);
  }

  assert.equal(explorers.kind, 'StatefulSet');
  const [container] = explorers.spec.template.spec.containers as [Container];
  const { config: loaded } = checkTrinityRun(expand(container.args), env, config);
  assert.equal(loaded.mode, 'explore');
  assert.equal(loaded.explorer.name, 'trinity-explore-0');
  assert.ok(
    container.env.some(
      (e: { name: string; valueFrom?: { fieldRef?: { fieldPath: string } } }) =>
        e.name === 'POD_NAME' && e.valueFrom?.fieldRef?.fieldPath === 'metadata.name',
    ),
    'POD_NAME from the pod name',
  );
});

test('a trinity command with a flag the CLI does not have fails the check', () => {
  assert.throws(() => checkTrinityRun(['run', '--config', 'x.yaml', '--nodes', '2'], {}, (g) => g), /Unknown option '--nodes'/);
});
