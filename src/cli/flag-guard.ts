// What commander lets through on a command line and a user never means: a flag that takes a value
// given a flag instead (`--api --cells 16:4` made `--cells` the API and 16:4 a stray argument),
// and a value-taking flag given twice (the last silently won: `--cells 512:64 ... --cells 128:32`).
// Both become usage errors naming the flag, before any value parser runs.
import type { EventEmitter } from 'node:events';
import type { Command, Option } from 'commander';
import { UsageError } from '../util/usage-error.js';

/** A flag's name as a user types it: `--model-path`, or `-o` for a short-only flag. */
const flagName = (o: Option): string => o.long ?? o.short ?? o.flags;

/** Guards every value-taking flag of this command and of its subcommands (call after they are registered). */
export function guardFlagValues(cmd: Command): void {
  const flags = new Set<string>();
  for (const o of cmd.options) {
    if (o.long) flags.add(o.long);
    if (o.short) flags.add(o.short);
  }
  // A command's flags include the built-in help flag, which commander does not list as an option.
  flags.add('--help').add('-h');
  for (const o of cmd.options) {
    if (!o.required && !o.optional) continue;
    const name = flagName(o);
    let given = false;
    // Before commander's own listener (which runs the value parser) so the parser never sees a flag.
    // (A Command is an EventEmitter; commander's typings leave that out.)
    (cmd as unknown as EventEmitter).prependListener(`option:${o.name()}`, (value: unknown) => {
      if (typeof value === 'string' && (flags.has(value) || flags.has(value.replace(/=.*$/s, '')))) {
        throw new UsageError(`${name} needs a value, but the next argument is the flag ${value} (give ${name} VALUE)`);
      }
      // The values are not repeated in the message: one may be a secret (--api-key, a URL with credentials).
      if (given && !o.variadic) throw new UsageError(`${name} is given twice (the second would silently replace the first): give it once`);
      given = true;
    });
  }
  for (const sub of cmd.commands) guardFlagValues(sub);
}
