// Where a trainer process (mode train) and its explorer processes (mode explore) meet to move weights, chosen as the
// shared buffer is: a PostgreSQL buffer keeps the sync pointer, the sync requests and the finished marker in its
// database (./postgres-channel.ts), so explorers on other machines reach them; an SQLite buffer (processes on
// one machine) keeps them in the job folder (./sync-folder.ts). Either way the trainer writes the weights folders
// under its job folder.
import { isPostgresUrl } from '../buffer/index.js';
import { PostgresWeightChannel } from './postgres-channel.js';
import { SyncFolderChannel } from './sync-folder.js';
import type { ProcessWeightChannel } from './weight-channel.js';

export interface ProcessWeightChannelOptions {
  /** The shared buffer's path: a PostgreSQL URL or an SQLite file. */
  path: string;
  /** The buffer's table prefix (PostgreSQL): the row lives in `<table>_sync`. */
  table: string;
  /** The job folder: the trainer writes the weights versions under `<jobDir>/sync/`. */
  jobDir: string;
}

export async function openProcessWeightChannel(options: ProcessWeightChannelOptions): Promise<ProcessWeightChannel> {
  if (isPostgresUrl(options.path))
    return PostgresWeightChannel.open({ url: options.path, table: options.table, jobDir: options.jobDir });
  return new SyncFolderChannel(options.jobDir);
}
