import type { Command } from 'commander';

// Placeholder registration; the real command lands with its module.
export function registerSweep(_program: Command, _setResult: (code: number) => void): void {}
