// A usage error: a bad flag value, or a missing file named on the command line. The CLI prints its
// message and exits 2; the sweep, the engine and the server raise it before loading anything.
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}
