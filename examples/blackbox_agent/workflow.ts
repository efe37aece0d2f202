// The workflow that trains agent.mjs as a black box (Trinity-RFT's WorkflowWithRecording): each run starts the agent
// as a separate process with the rollout server's base URL and the run's own API key in OPENAI_BASE_URL /
// OPENAI_API_KEY, waits for it, scores the answer it printed, and sets the reward on what the server recorded under
// that key — one experience per conversation, the re-ask turn between two replies masked out.
//
// A hung agent is killed after workflow_args.agent_timeout seconds (default 60), a crashed one (non-zero exit, a
// signal) is reported with its exit status and the tail of its stderr: either way the run fails with that reason in
// its status (and the step's failure counts), the key is revoked, and the step goes on. A run that is stopped or times
// out (explorer.max_timeout) kills the agent too.
//
// workflow_args (per taskset or row): agent_program — the script to run with node, relative to the config's folder
// (default: this folder's agent.mjs); agent_timeout — seconds.
import { spawn } from 'node:child_process';
import { isAbsolute, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type RecordingContext, workflowWithRecording } from 'trinity-rft/rft';

const DEFAULT_AGENT = fileURLToPath(new URL('./agent.mjs', import.meta.url));
const DEFAULT_TIMEOUT_SECONDS = 60;
/** How much of the agent's stderr a failure reason quotes (its end). */
const STDERR_TAIL_CHARS = 1500;

/** What the agent process printed, or why it failed. */
export interface AgentOutcome {
  stdout: string;
  stderr: string;
}

/**
 * Runs `node <program> ...args` with the run's endpoint in its environment; resolves with its output when it exits
 * 0, rejects naming the reason otherwise (timeout, exit code, signal, a spawn error, the run aborted).
 */
export function runAgentProcess(
  program: string,
  args: readonly string[],
  endpoint: { baseUrl: string; apiKey: string },
  options: { timeoutSeconds: number; signal: AbortSignal },
): Promise<AgentOutcome> {
  return new Promise((resolvePromise, reject) => {
    if (options.signal.aborted) return reject(options.signal.reason);
    const child = spawn(process.execPath, [program, ...args], {
      env: { ...process.env, OPENAI_BASE_URL: endpoint.baseUrl, OPENAI_API_KEY: endpoint.apiKey },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr = (stderr + chunk).slice(-STDERR_TAIL_CHARS);
    });
    let killedBecause: Error | null = null;
    const kill = (reason: Error) => {
      killedBecause ??= reason;
      child.kill('SIGKILL');
    };
    const timer = setTimeout(
      () => kill(new Error(`the agent did not finish within ${options.timeoutSeconds} s (workflow_args.agent_timeout); killed`)),
      options.timeoutSeconds * 1000,
    );
    const onAbort = () => kill(options.signal.reason instanceof Error ? options.signal.reason : new Error('the run was stopped'));
    options.signal.addEventListener('abort', onAbort, { once: true });
    const done = () => {
      clearTimeout(timer);
      options.signal.removeEventListener('abort', onAbort);
    };
    child.on('error', (error) => {
      done();
      reject(new Error(`the agent could not be started (node ${program}): ${error.message}`));
    });
    child.on('close', (code, signal) => {
      done();
      const tail = stderr.trim() ? `; its stderr ends: ${stderr.trim()}` : '';
      if (killedBecause) reject(new Error(`${killedBecause.message}${tail}`));
      else if (code === 0) resolvePromise({ stdout, stderr });
      else reject(new Error(`the agent ${code !== null ? `exited with code ${code}` : `was killed by ${signal}`}${tail}`));
    });
  });
}

/** workflow_args of a task, checked: the agent to run (absolute) and its timeout. */
function agentArgs(args: Record<string, unknown>, baseDir: string | undefined): { program: string; timeoutSeconds: number } {
  const program = args.agent_program ?? DEFAULT_AGENT;
  if (typeof program !== 'string' || program === '')
    throw new Error(`workflow_args.agent_program must be a path to a script, got ${JSON.stringify(program)}`);
  const timeoutSeconds = args.agent_timeout ?? DEFAULT_TIMEOUT_SECONDS;
  if (typeof timeoutSeconds !== 'number' || !(timeoutSeconds > 0))
    throw new Error(`workflow_args.agent_timeout must be a positive number of seconds, got ${JSON.stringify(timeoutSeconds)}`);
  return { program: isAbsolute(program) ? program : resolve(baseDir ?? process.cwd(), program), timeoutSeconds };
}

/** The run: start the agent, wait, score its last printed line against the task's response. */
async function runAgent(context: RecordingContext): Promise<Record<string, number>> {
  const { task, seed, signal } = context;
  const { program, timeoutSeconds } = agentArgs(task.workflowArgs ?? {}, context.baseDir);
  const temperature = task.rolloutArgs?.temperature;
  const args = [
    task.prompt ?? '',
    '--model',
    context.modelName,
    '--seed',
    String(seed),
    ...(typeof temperature === 'number' ? ['--temperature', String(temperature)] : []),
  ];
  const started = performance.now();
  const { stdout } = await runAgentProcess(program, args, context, { timeoutSeconds, signal });
  const answer = stdout.trim().split('\n').at(-1)?.trim() ?? '';
  const correct = answer === (task.response ?? '').trim() ? 1 : 0;
  context.updateReward(correct);
  return { correct, agent_seconds: (performance.now() - started) / 1000 };
}

export const blackboxAgentWorkflow = workflowWithRecording({
  description: 'examples/blackbox_agent: agent.mjs run as a separate process on the rollout server, recorded by key',
  workflowArgs: ['agent_program', 'agent_timeout'],
  runAsync: runAgent,
});
