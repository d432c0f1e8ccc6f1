// A usage error: bad flag value or missing file named on the command line. Exit code 2.
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}
