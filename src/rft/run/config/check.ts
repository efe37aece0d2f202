// What `trinity config check` checks, as a function of the YAML text: parse + schema + rules (./load.ts),
// then the pre-run checks (./preflight.ts), every problem located in the text (file:line:column or the --set
// override). The command (src/cli/config-command.ts) and the Studio's config builder (src/studio/config-builder.ts)
// both call it, so the builder shows exactly the errors the command prints. Module-path algorithm modules
// (`policy_loss_fn: ./my-loss.ts#myLoss`) are loaded and registered first, as `trinity run` does, so the algorithm
// section is checked with them.
import { dirname, resolve } from 'node:path';
import YAML from 'yaml';
import type { AlgorithmResolver } from '../../algorithm/config.js';
import { loadAlgorithmPlugins } from '../../algorithm/plugins.js';
import {
  type Config,
  ConfigError,
  type ConfigProblem,
  parseConfigText,
  readConfigFile,
  resolveStages,
  type StageConfig,
} from './index.js';
import { preflightProblems } from './preflight.js';
import { describeTrinityKeys } from './trinity-report.js';

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
  /**
   * The resolved config as `trinity config check` prints it: one YAML document per stage, secrets masked, after the
   * Trinity keys ignored here and those mapped, as comment lines (./trinity-report.ts).
   */
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
  if (options.resolveAlgorithm) await registerAlgorithmPlugins(text, file, overrides);
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
  const trinityKeys = await describeTrinityKeys(config, stages, options.env);
  const comments = trinityKeys.map((line) => `# ${line}\n`).join('');
  return { config, resolvedYaml: comments + documents.join('---\n') };
}

/**
 * Loads the module-path algorithm modules of every stage from the config's folder; one that does not load (no file,
 * no such export, not a module) is a problem of its stage's algorithm section. A config that does not parse loads
 * none: the check's own parse then reports all its problems together.
 */
async function registerAlgorithmPlugins(text: string, file: string, overrides: readonly string[]): Promise<void> {
  let parsed: ReturnType<typeof parseConfigText>;
  try {
    parsed = parseConfigText(text, { file, overrides });
  } catch (error) {
    if (error instanceof ConfigError) return;
    throw error;
  }
  const { config, locate } = parsed;
  const problems: ConfigProblem[] = [];
  for (const [i, stage] of resolveStages(config).entries()) {
    try {
      await loadAlgorithmPlugins(stage.algorithm, dirname(resolve(file)));
    } catch (error) {
      problems.push({
        path: config.stages.length > 0 ? `stages.${i}.algorithm` : 'algorithm',
        message: (error as Error).message,
      });
    }
  }
  if (problems.length > 0) {
    locate(problems);
    throw new ConfigError(problems, file);
  }
}

/** The printable config: secrets masked, the single-stage marker left out. */
function redact(stage: StageConfig): object {
  const { stage_name, ...run } = stage;
  const rollout = run.explorer.rollout_model;
  const explorer = { ...run.explorer, rollout_model: { ...rollout, api_key: rollout.api_key === null ? null : '***' } };
  return stage_name === '' ? { ...run, explorer } : { stage_name, ...run, explorer };
}
