// Whether a process is still the one a record names: it exists (signal 0), and it started when the record says (a pid
// the OS gave to another process since has another start time). Run records, job folder locks and explorer
// registrations keep a pid; this is how each checks it.
import { readFileSync } from 'node:fs';

/**
 * When process `pid` started (Linux: field 22 of /proc/<pid>/stat, after the parenthesised command name, which may
 * itself hold spaces and parentheses); null when there is no such process or no /proc to ask.
 */
export function processStartTime(pid: number): string | null {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // fields after the command name: 3 (state) is the first, so 22 is the 20th
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return fields[19] ?? null;
}

/** Whether process `pid` exists on this machine (signal 0; EPERM: it exists, owned by someone else). */
export function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
