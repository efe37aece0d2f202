// Writes that name their file. Node names the path when opening or renaming fails (EISDIR, ENOENT), but a failed
// write says only "ENOSPC: no space left on device, write" (likewise EFBIG, EIO), a string too large to write is a
// RangeError naming nothing, and a path alone does not say which part of a checkpoint or which metrics were lost.
//
//   writingFile("checkpoint 3's optimizer state", file, () => torch.saveSafetensors(file, tensors));
//   // throws FileWriteError: cannot write checkpoint 3's optimizer state to /job/.../optimizer.safetensors: ENOSPC: ...

/** A write that failed: what was being written, where, and the error's code (ENOSPC, EISDIR...) kept for callers. */
export class FileWriteError extends Error {
  readonly code: string | undefined;
  constructor(
    readonly what: string,
    readonly file: string,
    cause: unknown,
  ) {
    super(`cannot write ${what} to ${file}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'FileWriteError';
    this.code = typeof (cause as { code?: unknown })?.code === 'string' ? (cause as { code: string }).code : undefined;
  }
}

/** Runs `write`; an error it throws becomes a FileWriteError naming `what` and `file`. */
export function writingFile<T>(what: string, file: string, write: () => T): T {
  try {
    return write();
  } catch (error) {
    throw new FileWriteError(what, file, error);
  }
}
