// `trinity studio [--runs DIR] [--port P] [--host H]`: the web app over a runs folder (src/studio).
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';

export const STUDIO_HELP = `trinity studio [--runs DIR] [--port P] [--host H]
  Serves Trinity Studio, a web app over a runs folder: every run and stage with its status and last metrics (live),
  curves of any metric (smoothing, log scale, runs overlaid, stage boundaries), rollouts (prompt, response, reward,
  advantage, finish reason, per-token log-probs, multi-turn turns with the action mask; filters), eval answers before
  vs after a stage, and a run's experience buffer. It only reads what runs write: a run does not know it is watched.

  --runs DIR    the runs folder: a checkpoint_root_dir (default ./checkpoints, as trinity run uses), a project
                folder or one job folder
  --port P      default 8765 (0: any free port)
  --host H      listen address (default 127.0.0.1: this machine only). Any other address needs the token printed
                at start (open the printed address once; the browser keeps it in a cookie)
  --token T     the token for a non-loopback --host (default: a random one; at least 16 characters)
`;

export interface StudioCommandIO {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
}

/** Runs `trinity studio ...` until SIGINT/SIGTERM; returns the exit code. */
export async function studioCommand(args: string[], io: StudioCommandIO = process): Promise<number> {
  let values: { runs?: string; port?: string; host?: string; token?: string; help?: boolean };
  try {
    ({ values } = parseArgs({
      args,
      options: {
        runs: { type: 'string' },
        port: { type: 'string' },
        host: { type: 'string' },
        token: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    }));
  } catch (error) {
    io.stderr.write(`trinity studio: ${(error as Error).message}\n\n${STUDIO_HELP}`);
    return 2;
  }
  if (values.help) {
    io.stdout.write(STUDIO_HELP);
    return 0;
  }
  const port = values.port === undefined ? 8765 : Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    io.stderr.write(`trinity studio: --port must be an integer in [0, 65535], got '${values.port}'\n`);
    return 2;
  }
  const { startStudio } = await import('../studio/index.js');
  const runsDir = resolve(values.runs ?? 'checkpoints');
  let studio: Awaited<ReturnType<typeof startStudio>>;
  try {
    studio = await startStudio({
      runsDir,
      port,
      ...(values.host !== undefined ? { host: values.host } : {}),
      ...(values.token !== undefined ? { token: values.token } : {}),
    });
  } catch (error) {
    io.stderr.write(`trinity studio: ${(error as Error).message}\n`);
    return 1;
  }
  io.stdout.write(`Trinity Studio over ${runsDir}\n  open ${studio.openUrl}\n`);
  if (studio.token !== null) io.stdout.write('  (the token in this address is needed once per browser; keep it private)\n');
  await new Promise<void>((resolvePromise) => {
    const stop = () => resolvePromise();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
  await studio.close();
  return 0;
}
