// A LISTEN connection that is remade after it drops: the waiting side of NOTIFY, for the buffer's readers
// (../buffer/postgres.ts) and the weight sync row (../sync/postgres-channel.ts).
//
// listen() connects and runs LISTEN once, and then only while no connection is up: a dropped connection (an error, a
// server restart, or its user's drop()) is forgotten, its user is told (onDropped: waiters look again rather than
// sleep through a change they can no longer hear of), and the next listen() makes a new one. A change made while no
// connection was up is found by the look after the next listen() (onConnected re-reads before listen() resolves).
import type pg from 'pg';
import { type PostgresConnectionOptions, postgresClient } from './postgres.js';

export interface PostgresListenerOptions extends PostgresConnectionOptions {
  /** The channel, as written after LISTEN (a quoted identifier, or a checked plain one). */
  channel: string;
  /** Runs on a new connection after LISTEN, before listen() resolves (a re-read of what changed while none was up). */
  onConnected?: () => Promise<void>;
  /** A notification came; `drop()` drops this connection (the next listen() makes a new one). */
  onNotification: (drop: () => void) => void;
  /** The connection dropped (an error, or drop()). */
  onDropped: () => void;
  /** The error listen() throws when connecting, LISTEN or onConnected failed. */
  nameError: (error: unknown) => Error;
}

export class PostgresListener {
  readonly #options: PostgresListenerOptions;
  /** The LISTEN connection (made by the first listen(); remade after it drops). */
  #connection: Promise<pg.Client> | null = null;

  constructor(options: PostgresListenerOptions) {
    this.#options = options;
  }

  /** False while no connection is up (the next listen() makes one). */
  get listening(): boolean {
    return this.#connection !== null;
  }

  /** The LISTEN connection, connected and listening (remade if it dropped). */
  async listen(): Promise<void> {
    if (this.#connection === null) {
      const options = this.#options;
      const client = postgresClient(options);
      const drop = () => {
        if (this.#connection === connecting) this.#connection = null;
        options.onDropped();
        client.end().catch(() => {});
      };
      const connecting = (async () => {
        try {
          await client.connect();
          await client.query(`LISTEN ${options.channel}`);
          await options.onConnected?.();
        } catch (error) {
          await client.end().catch(() => {});
          throw options.nameError(error);
        }
        return client;
      })();
      this.#connection = connecting;
      client.on('notification', () => options.onNotification(drop));
      client.on('error', drop);
      connecting.catch(() => {
        if (this.#connection === connecting) this.#connection = null;
      });
    }
    await this.#connection;
  }

  /** Ends the connection, if one is up or coming (a later listen() makes a new one). */
  async close(): Promise<void> {
    const connection = this.#connection;
    this.#connection = null;
    await connection?.then((client) => client.end());
  }
}
