// Chromium for the Studio's browser tests: Debian's chromium (scripts/setup.sh installs it) or $CHROMIUM_PATH,
// driven by playwright-core with that executable.
import { existsSync } from 'node:fs';
import { type Browser, chromium } from 'playwright-core';

export function chromiumPath(): string {
  const candidates = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'].filter(
    (p): p is string => p !== undefined && p !== '',
  );
  const found = candidates.find((p) => existsSync(p));
  if (found === undefined)
    throw new Error(
      `no Chromium at ${candidates.join(', ')}: run scripts/setup.sh (apt-get install chromium) or set CHROMIUM_PATH`,
    );
  return found;
}

export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: chromiumPath(), args: ['--no-sandbox', '--disable-dev-shm-usage'] });
}
