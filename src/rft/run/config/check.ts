// What `trinity config check` checks, as a function of the YAML text: parse + schema + rules (./load.ts),
// then the pre-run checks (./preflight.ts), every problem located in the text (file:line:column or the --set
// override). The command (src/cli/config-command.ts) and the Studio's config builder (src/studio/config-builder.ts)
// both call it, so the builder shows exactly the errors the command prints.
import { dirname, resolve } from 'node:path';
import YAML from 'yaml';
import type { AlgorithmResolver } from '../../algorithm/config.js';
import { type Config, ConfigError, parseConfigText, readConfigFile, resolveStages, type StageConfig } from './index.js';
import { preflightProblems } from './preflight.js';

export interface ConfigCheckOptions {
  /** `key.path=value` overrides (`--set`). */
  overrides?: readonly string[];
  /** Checks the algorithm section (src/rft/algorithm's resolveAlgorithm); without it the section is not checked. */
  resolveAlgorithm?: AlgorithmResolver;
  /** The environment the run would have (monitor credentials); default process.env. */
  env?: NodeJS.ProcessEnv;
}

export interface ConfigCheckResult {
  config: Config;
  /** The resolved config as `trinity config check` prints it: one YAML document per stage, secrets masked. */
  resolvedYaml: string;
}

/** Checks the config file `file`; throws ConfigError with every problem. */
export async function checkConfigFile(file: string, options: ConfigCheckOptions = {}): Promise<ConfigCheckResult> {
  return checkConfigText(readConfigFile(file), file, options);
}

/**
 * Checks YAML `text` as if it were the content of `file` (relative paths resolve against its folder; problems name
 * it); throws ConfigError with every problem. Reads nothing from `file` itself.
 */
export async function checkConfigText(text: string, file: string, options: ConfigCheckOptions = {}): Promise<ConfigCheckResult> {
  const overrides = options.overrides ?? [];
  const { config, locate } = parseConfigText(text, {
    file,
    overrides,
    ...(options.resolveAlgorithm ? { resolveAlgorithm: options.resolveAlgorithm } : {}),
  });
  // what `trinity run` checks before its first stage: folders, model, tasksets and their rows, names
  const problems = await preflightProblems(config, {
    baseDir: dirname(resolve(file)),
    ...(options.env ? { env: options.env } : {}),
  });
  if (problems.length > 0) {
    locate(problems);
    throw new ConfigError(problems, file);
  }
  const stages = resolveStages(config);
  const documents = stages.map((stage, i) => {
    const header = config.stages.length > 0 ? `# stage ${i + 1} of ${stages.length}: ${stage.stage_name}\n` : '';
    return header + YAML.stringify(redact(stage), { lineWidth: 0 });
  });
  return { config, resolvedYaml: documents.join('---\n') };
}

/** The printable config: secrets masked, the single-stage marker left out. */
function redact(stage: StageConfig): object {
  const { stage_name, ...run } = stage;
  const rollout = run.explorer.rollout_model;
  const explorer = { ...run.explorer, rollout_model: { ...rollout, api_key: rollout.api_key === null ? null : '***' } };
  return stage_name === '' ? { ...run, explorer } : { stage_name, ...run, explorer };
}
