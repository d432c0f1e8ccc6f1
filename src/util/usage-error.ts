// A usage error: a bad flag value, or a missing file named on the command line. The CLI prints its
// message and exits 2; the sweep, the engine and the server raise it before loading anything.
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

/**
 * A script's commander parse (made with exitOverride()): its result, or undefined with the exit
 * code set when commander ended it (0 for --help, 2 for its own errors, which it has printed).
 * Our UsageErrors propagate, for the caller to print.
 */
export function parseOrExitCode<T>(parse: () => T): T | undefined {
  try {
    return parse();
  } catch (err) {
    if (err instanceof UsageError) throw err;
    process.exitCode = (err as { exitCode?: number }).exitCode === 0 ? 0 : 2;
    return undefined;
  }
}
