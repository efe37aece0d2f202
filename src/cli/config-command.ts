// `trinity config check FILE [--set key=value ...]` (or `--config FILE`, as `trinity run` takes it): validates a run config and prints it resolved (every default
// and derived key filled in), or every problem with its key path and where it was written.
import { parseArgs } from 'node:util';
import { ConfigError } from '../rft/run/config/index.js';
import type { AlgorithmResolver } from '../rft/run/config/index.js';

export const CONFIG_HELP = `trinity config check FILE [--set key.path=value ...]
trinity config check --config FILE [--set key.path=value ...]
  Validates a run config (YAML, Trinity-RFT's keys) and prints it resolved, as YAML: every default and derived key
  filled in, relative paths made absolute, one document per stage of a multi-stage run. Then checks what
  "trinity run" checks before its first stage: the job folder can be made, the model folder has config.json, every
  taskset loads (each row has the format keys), every workflow and reward function name is registered or loads as a
  module path, dataset files exist. On errors prints each problem with its key path (and file:line:column where
  known), and exits 1. A config written for Trinity-RFT runs with only its paths changed: its keys for vLLM, veRL
  and Ray are listed as "ignored on this backend" and its values read in this backend's terms as "mapped", in
  comment lines above the resolved config (trinity run prints them too; docs/trinity-configs.md).

  --set key.path=value   override a key (repeatable): dotted path, list indices as numbers (stages.0.mode=train),
                         the value read as YAML (8, true, null, [a, b])
  --no-algorithm-check   do not resolve the algorithm section with the algorithm library (which loads libtorch)

  Strings may use \${VAR} and \${VAR:-default} (also Trinity's \${oc.env:VAR,default}).
`;

/** Where the command writes (the process's streams; tests pass their own). */
export interface CommandOutput {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
}

/** Runs `trinity config ...`; returns the exit code. */
export async function configCommand(args: string[], output: CommandOutput = process): Promise<number> {
  const { stdout, stderr } = output;
  const [sub, ...rest] = args;
  if (sub === undefined || sub === '--help' || sub === '-h' || sub === 'help') {
    stdout.write(CONFIG_HELP);
    return sub === undefined ? 1 : 0;
  }
  if (sub !== 'check') {
    stderr.write(`trinity config: unknown subcommand '${sub}'\n\n${CONFIG_HELP}`);
    return 2;
  }
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
      config: { type: 'string' },
      set: { type: 'string', multiple: true, default: [] },
      'no-algorithm-check': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    stdout.write(CONFIG_HELP);
    return 0;
  }
  // the file as a positional or as `--config FILE` (the flag `trinity run` and `trinity bench` take), not both
  const files = values.config === undefined ? positionals : [values.config, ...positionals];
  const [file] = files;
  if (file === undefined || files.length > 1) {
    stderr.write(`trinity config check: give exactly one config file\n\n${CONFIG_HELP}`);
    return 2;
  }
  let resolveAlgorithm: AlgorithmResolver | undefined;
  if (!values['no-algorithm-check']) {
    try {
      resolveAlgorithm = (await import('../rft/algorithm/presets.js')).resolveAlgorithm;
    } catch (error) {
      stderr.write(`note: the algorithm section is not checked (${(error as Error).message.split('\n')[0]})\n`);
    }
  }
  try {
    // the same function the Studio's config builder calls (src/rft/run/config/check.ts)
    const { checkConfigFile } = await import('../rft/run/config/check.js');
    const { resolvedYaml } = await checkConfigFile(file, {
      overrides: values.set,
      ...(resolveAlgorithm ? { resolveAlgorithm } : {}),
    });
    stdout.write(resolvedYaml);
    return 0;
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    stderr.write(`${error.message}\n`);
    return 1;
  }
}
