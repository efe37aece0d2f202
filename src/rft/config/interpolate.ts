// ${...} interpolation of a config tree, the forms Trinity-RFT's configs (OmegaConf) and the shell write:
//
//   ${VAR}, ${VAR:-default}                 an environment variable (as the shell: `:-` also replaces an empty value)
//   ${oc.env:VAR}, ${oc.env:VAR,default}    OmegaConf's environment resolver
//   ${model.model_path}, ${stages.0.mode}   a reference to another key of the config (its absolute key path)
//   ${.x}, ${..x}                           a relative reference: a key of the mapping that holds this one (`.x`),
//                                           of the mapping above it (`..x`): one dot per level, as OmegaConf
//   $${...}                                 a literal ${...}
//
// A default may hold interpolations itself (`${oc.env:X,${oc.env:Y,z}}`), resolved only when it is used, as OmegaConf
// does. A string that is exactly one reference takes the referenced value as it is (a number, a list), as OmegaConf's
// node interpolation; inside other text a value reads as text. References read the tree after the `--set` overrides,
// each referenced key is resolved once (in place), and a reference cycle is a problem, not a hang.
//
// Inside trainer.trainer_config (veRL's own config, which Trinity completes with veRL's defaults before OmegaConf
// resolves it) a reference to a key of that config that the file does not set is left as written: upstream
// ppo_countdown_megatron's critic reads `${trainer.trainer_config.actor_rollout_ref.actor.ppo_epochs}`, a veRL default.
// That section is reported as ignored here (src/rft/config/ignored-keys.ts), apart from the knobs it maps.
import type { ConfigProblem } from './errors.js';
import { clone, getIn, isMapping, joinPath, type Segment, type Tree } from './source.js';

type Env = Readonly<Record<string, string | undefined>>;

const SHELL_FORM = /^([A-Za-z_][A-Za-z0-9_]*)(?::-([\s\S]*))?$/;
const OMEGACONF_ENV_FORM = /^oc\.env:\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:,\s*([\s\S]*))?$/;
/** `a.b`, `a.0.b`, `.x`, `..x`: key names joined by dots (a single name with no dot is the shell's ${VAR}). */
const REFERENCE_FORM = /^\.*[\w-]+(?:\.[\w-]+)*$/;

/** Replaces the ${...} interpolations of every string of the tree (in place); problems name the key path. */
export function interpolateConfig(tree: Tree, env: Env, problems: ConfigProblem[]): void {
  new Interpolation(tree, env, problems).resolveTree([]);
}

/** A key path inside trainer.trainer_config, of the run or of a stage. */
function inVerlConfig(path: readonly Segment[]): boolean {
  const at = path[0] === 'stages' ? path.slice(2) : path;
  return at[0] === 'trainer' && at[1] === 'trainer_config';
}

/** Index of the `}` that closes a `${` whose body starts at `from` (nested `${...}` counted), or -1 if unclosed. */
function closingBrace(text: string, from: number): number {
  let depth = 1;
  for (let i = from; i < text.length; i++) {
    if (text[i] === '$' && text[i + 1] === '{') {
      depth++;
      i++;
    } else if (text[i] === '}' && --depth === 0) return i;
  }
  return -1;
}

/** A value inside other text: scalars as written, lists and mappings as JSON. */
const asText = (value: unknown): string => (typeof value === 'object' && value !== null ? JSON.stringify(value) : String(value));

class Interpolation {
  /** Key paths of strings already resolved in place (a literal `$${x}` becomes `${x}` and must stay so). */
  private readonly resolved = new Set<string>();
  /** The keys being resolved, outermost first: a reference back into this chain is a cycle. */
  private readonly resolving: string[] = [];

  constructor(
    private readonly tree: Tree,
    private readonly env: Env,
    private readonly problems: ConfigProblem[],
  ) {}

  /** Resolves every string under `path` in place. */
  resolveTree(path: Segment[]): void {
    const node = getIn(this.tree, path);
    if (typeof node === 'string') this.resolveKey(path);
    else if (Array.isArray(node)) for (let i = 0; i < node.length; i++) this.resolveTree([...path, i]);
    else if (isMapping(node)) for (const key of Object.keys(node)) this.resolveTree([...path, key]);
  }

  /** Resolves the string at `path` (once) and writes the result there. */
  private resolveKey(path: Segment[]): void {
    const text = getIn(this.tree, path);
    if (typeof text !== 'string' || !text.includes('${')) return;
    const key = joinPath(path);
    if (this.resolved.has(key)) return;
    this.resolving.push(key);
    const value = this.resolveString(text, path);
    this.resolving.pop();
    this.resolved.add(key);
    const container = getIn(this.tree, path.slice(0, -1)) as Record<Segment, unknown>;
    container[path[path.length - 1] as Segment] = value;
  }

  /** The value of `text` at `path`: the referenced value itself where the text is one reference, else a string. */
  private resolveString(text: string, path: Segment[]): unknown {
    if (text.startsWith('${') && closingBrace(text, 2) === text.length - 1) return this.expand(text, path);
    let out = '';
    let i = 0;
    while (i < text.length) {
      const open = text.indexOf('${', i);
      if (open < 0) return out + text.slice(i);
      const literal = text[open - 1] === '$';
      out += text.slice(i, literal ? open - 1 : open);
      const close = closingBrace(text, open + 2);
      if (close < 0) return out + text.slice(open); // an unclosed ${ is text
      const match = text.slice(open, close + 1);
      out += literal ? match : asText(this.expand(match, path));
      i = close + 1;
    }
    return out;
  }

  /** The value of one `${...}` (`match`) written at `path`; on a problem, the match as written. */
  private expand(match: string, path: Segment[]): unknown {
    const body = match.slice(2, -1);
    const envForm = SHELL_FORM.exec(body) ?? OMEGACONF_ENV_FORM.exec(body);
    if (envForm !== null) {
      const [, name, fallback] = envForm as unknown as [string, string, string | undefined];
      const value = this.env[name];
      // as the shell: ${VAR:-default} also replaces an empty value, ${VAR} keeps it
      if (value !== undefined && (value !== '' || fallback === undefined)) return value;
      if (fallback !== undefined) return asText(this.resolveString(fallback, path));
      this.problem(path, `environment variable ${name} is not set (in '${match}'); set it or give a default: \${${name}:-value}`);
      return match;
    }
    if (REFERENCE_FORM.test(body)) return this.reference(body, match, path);
    this.problem(
      path,
      `unsupported interpolation '${match}'; write \${VAR} or \${VAR:-default}, a key reference \${a.b}` +
        ` (or $\${...} for a literal)`,
    );
    return match;
  }

  /** The value of the key that reference `body` names, resolved; written at `path`. */
  private reference(body: string, match: string, path: Segment[]): unknown {
    const dots = body.length - body.replace(/^\.+/, '').length;
    const names = body
      .slice(dots)
      .split('.')
      .map((s): Segment => (/^\d+$/.test(s) ? Number(s) : s));
    // `.x` is a key of the mapping holding this key (path without its last segment); each further dot one level up
    if (dots > path.length) {
      this.problem(path, `config reference '${match}' goes ${dots} level(s) up from a key ${path.length} deep`);
      return match;
    }
    const target = [...(dots === 0 ? [] : path.slice(0, path.length - dots)), ...names];
    const key = joinPath(target);
    if (this.resolving.includes(key) || this.resolving.some((k) => k.startsWith(`${key}.`))) {
      const chain = [...this.resolving, key].join(' → ');
      this.problem(path, `config reference '${match}' is a cycle: ${chain}`);
      return match;
    }
    const value = getIn(this.tree, target);
    if (value === undefined && inVerlConfig(path) && inVerlConfig(target)) return match; // a veRL default (header)
    if (value === undefined) {
      const message = `config reference '${match}' names key ${key}, which the config does not set (a reference reads keys written in the file or with --set; for an environment variable write \${oc.env:NAME})`;
      this.problem(path, message);
      return match;
    }
    this.resolveTree(target);
    return clone(getIn(this.tree, target));
  }

  private problem(path: Segment[], message: string): void {
    this.problems.push({ path: joinPath(path), message });
  }
}
