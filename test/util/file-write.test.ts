// writingFile: a failed write names what was being written and the file, which Node's write errors do not
// ("ENOSPC: no space left on device, write"), and keeps the error's code for callers that check it.
import assert from 'node:assert/strict';
import { closeSync, openSync, writeSync } from 'node:fs';
import { test } from 'node:test';
import { FileWriteError, writingFile } from '../../src/util/index.js';

test('a full disk names the file and what was written; the code is kept', { skip: process.platform !== 'linux' }, () => {
  const fd = openSync('/dev/full', 'w'); // every write fails with ENOSPC
  try {
    assert.throws(() => writeSync(fd, Buffer.alloc(16)), /^Error: ENOSPC: no space left on device, write$/);
    assert.throws(
      () => writingFile("step 3's metrics", '/dev/full', () => writeSync(fd, Buffer.alloc(16))),
      (error: unknown) => {
        assert.ok(error instanceof FileWriteError);
        assert.equal(error.message, "cannot write step 3's metrics to /dev/full: ENOSPC: no space left on device, write");
        assert.equal(error.code, 'ENOSPC');
        assert.equal(error.file, '/dev/full');
        return true;
      },
    );
  } finally {
    closeSync(fd);
  }
});

test('a value returned by the write passes through', () => {
  assert.equal(
    writingFile('x', '/nowhere', () => 7),
    7,
  );
});
