// npm's postinstall: gives a copy of trinity-rft installed as a dependency (npm install <tarball or git URL> in a
// user's project) its native addon, native/build/trinity_torch.node, which the package does not hold (the addon is
// compiled against the machine's libtorch and linked to it by absolute path).
//   - In the repository itself (this folder is not inside a node_modules folder) it does nothing: scripts/setup.sh
//     runs `npm ci` and then builds the addon, so `npm ci` neither builds it twice nor runs setup.sh inside setup.sh.
//   - TRINITY_NATIVE_ADDON=/path/to/trinity_torch.node: copies that built addon into native/build instead of building
//     one (CI, several projects on one machine). It must be built from the same trinity-rft version, and the libtorch
//     it was built against must stay where it is.
//   - Otherwise it runs scripts/setup.sh, which finds libtorch (LIBTORCH, python3's torch, or the CPU wheel installed
//     into .cache/torch-py from pip) and builds the addon: a few minutes, once.
// A failure fails the install with setup's message; `npm rebuild trinity-rft` runs this again.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, renameSync, statSync } from 'node:fs';
import { dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const buildDir = join(packageRoot, 'native', 'build');

/** Copies the addon `source` names (and the build.json that describes it, when there is one) into native/build. */
function copyBuiltAddon(source) {
  const file = resolve(source);
  if (!existsSync(file) || !statSync(file).isFile())
    fail(`TRINITY_NATIVE_ADDON=${source}: no such file (name a built native/build/trinity_torch.node)`);
  mkdirSync(buildDir, { recursive: true });
  // copied under a temporary name and renamed: a process that loads the addon never sees half a file
  const target = join(buildDir, 'trinity_torch.node');
  copyFileSync(file, `${target}.${process.pid}.tmp`);
  renameSync(`${target}.${process.pid}.tmp`, target);
  const description = join(dirname(file), 'build.json');
  if (existsSync(description)) copyFileSync(description, join(buildDir, 'build.json'));
  console.log(`[trinity-rft] native addon copied from ${file} (TRINITY_NATIVE_ADDON); nothing built`);
}

function fail(message) {
  console.error(`[trinity-rft] ${message}`);
  process.exit(1);
}

if (packageRoot.includes(`${sep}node_modules${sep}`)) {
  const reuse = process.env.TRINITY_NATIVE_ADDON;
  if (reuse !== undefined && reuse !== '') copyBuiltAddon(reuse);
  else {
    const setup = spawnSync('bash', [join(packageRoot, 'scripts', 'setup.sh')], { stdio: 'inherit' });
    if (setup.status !== 0)
      fail(
        `building the native addon failed (scripts/setup.sh: ${setup.error?.message ?? (setup.signal ? `killed by ${setup.signal}` : `exit code ${setup.status}`)}); ` +
          'fix what it names above and run `npm rebuild trinity-rft`, or set TRINITY_NATIVE_ADDON to a built addon',
      );
  }
}
