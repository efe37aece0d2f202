// execute_python_code: AgentScope's Python tool, as Trinity-RFT's AgentScope math workflows register it (timeout 300 s,
// use_docker False): the model's code is written to a file in a fresh temporary folder and run there by a Python
// interpreter (`python3 -u main.py`, or workflow_args.python_executable), and the tool returns
//
//   <returncode>{code}</returncode><stdout>{stdout}</stdout><stderr>{stderr}</stderr>
//
// (a run past the timeout is killed: return code -1 and "TimeoutError: ..." in stderr). The folder is removed after.
// Like upstream, the code runs unsandboxed, as the user running training: to confine it, point python_executable at
// a wrapper that does (a container, firejail, a seccomp profile). Each stream keeps its first MAX_STREAM_CHARS
// characters (upstream keeps all), with a note when cut. An interpreter that cannot be started fails the task,
// naming it: the tool never answers the model with our setup's error.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ReActTool, ToolCallError } from './react-agent.js';

export const PYTHON_TIMEOUT_SECONDS = 300;
export const MAX_STREAM_CHARS = 100_000;

export interface PythonRun {
  returnCode: number;
  stdout: string;
  stderr: string;
}

function keepStart(text: string): string {
  return text.length <= MAX_STREAM_CHARS
    ? text
    : `${text.slice(0, MAX_STREAM_CHARS)}\n[output cut at ${MAX_STREAM_CHARS} characters]`;
}

/** Runs `code` with `python` in a fresh folder; see the header. */
export function runPython(
  code: string,
  options: { python: string; timeoutSeconds: number; signal?: AbortSignal },
): Promise<PythonRun> {
  const folder = mkdtempSync(join(tmpdir(), 'trinity-python-tool-'));
  writeFileSync(join(folder, 'main.py'), code);
  return new Promise<PythonRun>((done, fail) => {
    const child = spawn(options.python, ['-u', 'main.py'], { cwd: folder, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      if (stdout.length <= MAX_STREAM_CHARS) stdout += chunk;
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      if (stderr.length <= MAX_STREAM_CHARS) stderr += chunk;
    });
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, options.timeoutSeconds * 1000);
    const abort = () => child.kill('SIGKILL');
    options.signal?.addEventListener('abort', abort, { once: true });
    const finish = () => {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', abort);
      rmSync(folder, { recursive: true, force: true });
    };
    child.on('error', (error: NodeJS.ErrnoException) => {
      finish();
      fail(
        new Error(
          `execute_python_code: cannot start the Python interpreter '${options.python}' (${error.code ?? error.message}); ` +
            'install python3 or name one with workflow_args.python_executable',
        ),
      );
    });
    child.on('close', (code) => {
      finish();
      if (options.signal?.aborted) return fail(options.signal.reason);
      if (timedOut) {
        stderr += `TimeoutError: The code execution exceeded the timeout of ${options.timeoutSeconds} seconds.`;
        return done({ returnCode: -1, stdout: keepStart(stdout), stderr: keepStart(stderr) });
      }
      done({ returnCode: code ?? -1, stdout: keepStart(stdout), stderr: keepStart(stderr) });
    });
  });
}

export const formatPythonRun = (run: PythonRun): string =>
  `<returncode>${run.returnCode}</returncode><stdout>${run.stdout}</stdout><stderr>${run.stderr}</stderr>`;

/** The tool for the agent: `code` (a string) is required. */
export function pythonTool(python: string): ReActTool {
  return {
    schema: {
      type: 'function',
      function: {
        name: 'execute_python_code',
        description:
          'Run Python code from a temporary file and return its return code, standard output and standard error. ' +
          'Only what the code prints comes back; the file is deleted after the run.',
        parameters: {
          type: 'object',
          properties: { code: { type: 'string', description: 'The Python code to be executed.' } },
          required: ['code'],
        },
      },
    },
    run: async (args, signal) => {
      if (typeof args.code !== 'string') throw new ToolCallError('execute_python_code needs a string `code`');
      const run = await runPython(args.code, { python, timeoutSeconds: PYTHON_TIMEOUT_SECONDS, ...(signal ? { signal } : {}) });
      return formatPythonRun(run);
    },
  };
}
