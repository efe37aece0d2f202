// The studio's one error type with an HTTP status: a handler, the path matcher, the query readers (./router.ts) and
// the run context (./context.ts) throw it, and the server (./server.ts) answers with its status and message. In its
// own module so that the context and the route table, which import each other's types, both reach it without a cycle.

/** An error with the HTTP status it answers with. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'HttpError';
  }
}
