// Byte counts for people: one binary-unit formatter for headers, weight lines and logs.

/** Bytes with a binary unit that keeps small sizes readable (a 32 KiB block is not "0.0 MiB"). */
export function bytesText(bytes: number): string {
  if (bytes < 2 ** 20) return `${(bytes / 2 ** 10).toFixed(1)} KiB`;
  if (bytes < 2 ** 30) return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
  return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
}
