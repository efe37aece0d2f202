// A real PostgreSQL server for one test file: Debian's binaries (/usr/lib/postgresql/<v>/bin, installed by
// scripts/setup.sh), initdb + pg_ctl in a fresh temporary folder, a free TCP port on 127.0.0.1 with a password
// (scram-sha-256, so tests exercise real authentication) and the unix socket in the same folder.
//
// PostgreSQL refuses to run as root: under root (CI) the server runs as the `postgres` user (else `nobody`), which
// owns the temporary folder. Durability is switched off (fsync, synchronous_commit, full_page_writes): a test server
// dies with its data.
//
// Nothing is left behind when the test process dies: the server is started by a watchdog shell, in its own session,
// that holds a pipe from this process; when that pipe closes (stop(), a normal exit, or a SIGKILL of the test
// process) the watchdog stops the server and deletes the folder.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { appendFileSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import pg from 'pg';

export interface PostgresServer {
  host: string;
  port: number;
  user: string;
  password: string;
  /** The folder holding the data directory, the log and the unix socket. */
  dir: string;
  /** postgresql://user:password@127.0.0.1:port/<database> */
  url(database?: string): string;
  /** Creates a fresh database (a test's own namespace) and returns its URL. */
  createDatabase(name: string): Promise<string>;
  /** The server log (for failure messages). */
  log(): string;
  stop(): Promise<void>;
}

const USER = 'trinity';
const PASSWORD = 'test-secret-pw';

/** The folder of PostgreSQL's server binaries (newest installed version), or null. */
export function postgresBinDir(): string | null {
  if (process.env.PG_BIN_DIR) return process.env.PG_BIN_DIR;
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const versions = readdirSync(root)
    .filter((v) => existsSync(join(root, v, 'bin', 'initdb')))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] === undefined ? null : join(root, versions[0], 'bin');
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** The unprivileged account the server runs as when this process is root. */
function serverUser(): { name: string; uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null;
  for (const name of ['postgres', 'nobody']) {
    try {
      const uid = Number(execFileSync('id', ['-u', name], { encoding: 'utf8' }).trim());
      const gid = Number(execFileSync('id', ['-g', name], { encoding: 'utf8' }).trim());
      return { name, uid, gid };
    } catch {
      // no such user: try the next
    }
  }
  throw new Error('running as root, and neither the postgres nor the nobody user exists to run PostgreSQL as');
}

/**
 * A temporary folder the server's account can reach: the test runner's TMPDIR is often a root-only (0700) folder,
 * then /tmp.
 */
function traversableTmpdir(): string {
  const base = tmpdir();
  for (let dir = base; ; dir = dirname(dir)) {
    if ((statSync(dir).mode & 0o001) === 0) return '/tmp';
    if (dirname(dir) === dir) return base;
  }
}

/**
 * Where the server listens: by default 127.0.0.1 in this process's network namespace. A test that builds network
 * namespaces (test/rft/run/multinode-netns.test.ts) runs it inside one (`ip netns exec`), on an address there: then
 * only processes that reach that address can connect (createDatabase from this process cannot).
 */
export interface PostgresPlacement {
  netns?: string;
  host?: string;
}

/** Starts a server (about 2 s: initdb, then pg_ctl start). Call stop() in the test file's after(). */
export async function startPostgres(placement: PostgresPlacement = {}): Promise<PostgresServer> {
  const host = placement.host ?? '127.0.0.1';
  const bin = postgresBinDir();
  if (bin === null)
    throw new Error(
      'PostgreSQL server binaries not found in /usr/lib/postgresql/*/bin: run scripts/setup.sh (apt-get install postgresql)',
    );
  const account = serverUser();
  const dir = mkdtempSync(join(account === null ? tmpdir() : traversableTmpdir(), 'trinity-pg-'));
  if (account !== null) chownSync(dir, account.uid, account.gid);
  const asServer = (command: string, args: string[]): [string, string[]] =>
    account === null ? [command, args] : ['runuser', ['-u', account.name, '--', command, ...args]];
  const passwordFile = join(dir, 'pwfile');
  writeFileSync(passwordFile, `${PASSWORD}\n`, { mode: 0o600 });
  if (account !== null) chownSync(passwordFile, account.uid, account.gid);
  const data = join(dir, 'data');
  const [initdb, initArgs] = asServer(join(bin, 'initdb'), [
    '-D',
    data,
    '-U',
    USER,
    `--pwfile=${passwordFile}`,
    '--auth-local=trust',
    '--auth-host=scram-sha-256',
    '--no-sync',
    '--no-instructions',
    '-E',
    'UTF8',
    '--locale=C',
  ]);
  try {
    execFileSync(initdb, initArgs, { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(`initdb failed: ${(error as { stderr?: Buffer }).stderr?.toString() ?? String(error)}`);
  }
  // initdb's pg_hba.conf admits loopback clients only; a server on another address admits its subnet's
  if (host !== '127.0.0.1') appendFileSync(join(data, 'pg_hba.conf'), 'host all all samenet scram-sha-256\n');
  const port = await freePort();
  const logFile = join(dir, 'server.log');
  const options = [
    `-p ${port}`,
    `-k ${dir}`,
    `-c listen_addresses='${host}'`,
    '-c fsync=off',
    '-c synchronous_commit=off',
    '-c full_page_writes=off',
    '-c max_connections=100',
    '-c shared_buffers=32MB',
  ].join(' ');
  const pgCtl = join(bin, 'pg_ctl');
  // the watchdog: start, report, wait for the pipe to close, stop, clean up
  const script = [
    'set -u',
    `"${pgCtl}" -D "${data}" -l "${logFile}" -o "${options}" -w -t 60 start >/dev/null || { echo failed; exit 1; }`,
    'echo ready',
    'cat >/dev/null',
    `"${pgCtl}" -D "${data}" -m immediate -w stop >/dev/null 2>&1`,
    `rm -rf "${dir}"`,
  ].join('\n');
  const [serverShell, serverArgs] = asServer('sh', ['-c', script]);
  const [shell, shellArgs] =
    placement.netns === undefined
      ? [serverShell, serverArgs]
      : ['ip', ['netns', 'exec', placement.netns, serverShell, ...serverArgs]];
  const watchdog: ChildProcess = spawn(shell, shellArgs, { detached: true, stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise<void>((resolve) => watchdog.once('exit', () => resolve()));
  const readLog = () => {
    try {
      return execFileSync('cat', [logFile], { encoding: 'utf8' });
    } catch {
      return '(no log)';
    }
  };
  await new Promise<void>((resolve, reject) => {
    let out = '';
    let settled = false;
    watchdog.stdout?.on('data', (chunk) => {
      out += chunk;
      if (settled) return;
      if (out.includes('ready')) {
        settled = true;
        resolve();
      } else if (out.includes('failed')) {
        settled = true;
        reject(new Error(`pg_ctl start failed on port ${port}:\n${readLog()}`));
      }
    });
    void exited.then(() => {
      if (!settled) reject(new Error(`the PostgreSQL watchdog exited before the server was ready:\n${readLog()}`));
    });
  });
  const url = (database = 'postgres') => `postgresql://${USER}:${PASSWORD}@${host}:${port}/${database}`;
  let stopped = false;
  return {
    host,
    port,
    user: USER,
    password: PASSWORD,
    dir,
    url,
    log: readLog,
    async createDatabase(name: string) {
      const client = new pg.Client({ connectionString: url() });
      await client.connect();
      try {
        await client.query(`CREATE DATABASE "${name.replaceAll('"', '""')}"`);
      } finally {
        await client.end();
      }
      return url(name);
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      watchdog.stdin?.end();
      await exited;
    },
  };
}
