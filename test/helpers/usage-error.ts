// The message of the UsageError a call throws (fails the test when it throws nothing or something else).
import { expect } from 'vitest';
import { UsageError } from '../../src/util/usage-error.js';

export function usageMessage(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    return (err as Error).message;
  }
  throw new Error('expected a UsageError');
}
