import type { Command } from 'commander';

// Placeholder registration; the real command lands with its module.
export function registerConvert(_program: Command, _setResult: (code: number) => void): void {}
